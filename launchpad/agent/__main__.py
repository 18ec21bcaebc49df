"""`python -m launchpad.agent --workdir DIR`: supervise the trainer for the job in DIR.

It runs detached from the client (new session), starts the trainer, records its pid and, when it ends,
its exit code. SIGTERM/SIGINT are forwarded to the trainer so a teardown stops training cleanly.
(Pre-warm, async upload, heartbeat and the idle watchdog join it in issue 3.)
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from . import FILES, write_pidfile


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="launchpad-agent")
    parser.add_argument("--workdir", required=True, type=Path)
    args = parser.parse_args(argv)
    workdir: Path = args.workdir.resolve()
    write_pidfile(workdir / FILES["agent_pid"], os.getpid())
    (workdir / FILES["exit"]).unlink(missing_ok=True)

    env = dict(os.environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    cmd = [sys.executable, "-m", "launchpad.train", "--spec", str(workdir / FILES["spec"])]
    with open(workdir / FILES["log"], "ab", buffering=0) as log:
        log.write(f"[agent] {time.strftime('%Y-%m-%d %H:%M:%S')} starting trainer\n".encode())
        trainer = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=workdir)
        write_pidfile(workdir / FILES["trainer_pid"], trainer.pid)

        def forward(signum, _frame):
            if trainer.poll() is None:
                trainer.send_signal(signum)

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        code = trainer.wait()
        log.write(f"[agent] {time.strftime('%Y-%m-%d %H:%M:%S')} trainer exited with {code}\n".encode())
    tmp = workdir / (FILES["exit"] + ".tmp")
    tmp.write_text(f"{code}\n")
    os.replace(tmp, workdir / FILES["exit"])
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
