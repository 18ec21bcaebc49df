"""Stands in for the real self-stop command (e.g. `shutdown -h now`) in tests: we cannot power off the
CI machine, so this RECORDS the call instead. Named as such on purpose (see issue 3)."""

import json
import sys
import time

with open(sys.argv[1], "a") as f:
    f.write(json.dumps({"argv": sys.argv[2:], "at": time.time()}) + "\n")
