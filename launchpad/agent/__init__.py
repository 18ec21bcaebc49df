"""The on-instance agent: started by a provider's `sync`/`train`, it outlives the client.

Files it keeps in its work directory (the contract providers read):
    job.json      the job spec (written by sync)
    agent.pid     "<pid> <start-time>" of the agent
    trainer.pid   "<pid> <start-time>" of the trainer process
    train.log     the trainer's stdout and stderr
    status.json   phase/step/loss/... written by the trainer (heartbeat included)
    trainer.exit  the trainer's exit code (negative: killed by that signal), written when it ends
    SAVE_NOW      created by anyone who wants a checkpoint at the next step; the trainer removes it
"""

from __future__ import annotations

import os
from pathlib import Path

FILES = {
    "spec": "job.json",
    "agent_pid": "agent.pid",
    "trainer_pid": "trainer.pid",
    "log": "train.log",
    "status": "status.json",
    "exit": "trainer.exit",
    "save_now": "SAVE_NOW",
}


def stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: [state, ppid, pgrp, session, ...], or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of `pid` (guards against pid reuse), or None if it is gone or a zombie."""
    fields = stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return fields[19]


def write_pidfile(path: Path, pid: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{pid} {process_start_time(pid) or ''}\n")
    os.replace(tmp, path)


def pid_alive(path: Path) -> int | None:
    """The pid recorded in `path` if that very process is still alive, else None."""
    try:
        pid_s, _, start = path.read_text().strip().partition(" ")
        pid = int(pid_s)
    except (OSError, ValueError):
        return None
    now = process_start_time(pid)
    return pid if now is not None and (not start or now == start) else None
