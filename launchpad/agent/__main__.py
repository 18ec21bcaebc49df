"""`python -m launchpad.agent --workdir DIR`: the on-instance agent for the job in DIR.

Started detached from the client (a new session) by a provider's `train`; see launchpad/agent/runner.py
for what it does and launchpad/agent/__init__.py for the files it keeps.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launchpad.agent")
    parser.add_argument("--workdir", required=True, type=Path)
    args = parser.parse_args(argv)
    from .runner import main as run

    return run(args.workdir)


if __name__ == "__main__":
    sys.exit(main())
