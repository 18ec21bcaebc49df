"""A moto S3 server in its own process on 127.0.0.1 (in-process it would share our GIL and skew timings)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time


class MotoServer:
    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        exe = shutil.which("moto_server") or shutil.which("moto_server", path=os.path.dirname(sys.executable))
        if exe is None:
            sys.exit("moto_server not found: pip install 'moto[server]'")
        self.proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{self.port}"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        os.environ.update(AWS_ENDPOINT_URL=self.url, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                          AWS_DEFAULT_REGION="us-east-1")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
