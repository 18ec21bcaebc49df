"""The host side of the SSH transport: ``python -m launchpad.ssh.remote COMMAND WORKDIR ...``.

Runs ON the instance from the installed launchpad wheel (stdlib + launchpad.agent only: no paramiko,
no torch), so every client-side operation is one SSH round trip that prints one JSON line:

    launch WORKDIR        read {"NAME": "value"} from stdin (the recipe's resolved env, possibly
                          secrets: never on disk or in argv), start the agent detached with it
                          (new session, output to agent.log) unless one already runs -> {"pid", "already"}
    progress WORKDIR      status.json + agent liveness + trainer.exit -> {"status", "running", "exit_code"}
    tail WORKDIR          the trainer log from --offset bytes on; with --follow, until the agent exits
    stop WORKDIR          SIGTERM the agent's process group (and the trainer), SIGKILL after --grace s
    latest WORKDIR        the newest complete checkpoint of the job in its store -> CheckpointRef or null
    salvage WORKDIR       no agent alive: upload the complete checkpoints the dead one left in its upload
                          queue -> {"uploaded": [CheckpointRef...]} or {"skipped": why}
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from launchpad.agent import FILES, pid_alive
from launchpad.agent.workdir import job_running, job_state
from launchpad.agent.workdir import stop as stop_workdir


def _print(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def launch(workdir: Path) -> int:
    raw = sys.stdin.read()
    env_extra = json.loads(raw) if raw.strip() else {}
    if not isinstance(env_extra, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env_extra.items()):
        sys.stderr.write("launch: stdin must be a JSON object of strings\n")
        return 2
    if pid := pid_alive(workdir / FILES["agent_pid"]):
        _print({"pid": pid, "already": True})
        return 0
    (workdir / FILES["exit"]).unlink(missing_ok=True)
    os.umask(0o077)  # inherited by the agent and trainer: logs, status, pre-warmed data stay private
    env = {**os.environ, **env_extra, "PYTHONUNBUFFERED": "1"}
    with open(workdir / "agent.log", "ab") as log:
        # argv list, no shell; a new session so the agent outlives this SSH session and its hang-ups
        proc = subprocess.Popen(
            [sys.executable, "-m", "launchpad.agent", "--workdir", str(workdir)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=workdir,
            start_new_session=True, close_fds=True,
        )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:  # the agent records its pid first thing
        if pid_alive(workdir / FILES["agent_pid"]) == proc.pid or proc.poll() is not None:
            break
        time.sleep(0.05)
    if proc.poll() is not None and proc.returncode != 0 and not (workdir / FILES["exit"]).exists():
        sys.stderr.write(f"launch: the agent exited with {proc.returncode} at once; see {workdir}/agent.log\n")
        return 1
    _print({"pid": proc.pid, "already": False})
    return 0


def progress(workdir: Path) -> int:
    state = job_state(workdir)
    _print({"status": state.status, "running": state.running, "exit_code": state.exit_code,
            "autostopped": state.autostopped, "ended_s": None if state.running else _ended_s(workdir)})
    return 0


def _ended_s(workdir: Path) -> float | None:
    """Seconds since the agent recorded the job's end (its exit file; else its last status write, when it
    died without one), by this machine's clock: a client compares ages, never its clock with ours."""
    for name in (FILES["exit"], FILES["status"]):
        try:
            return max(0.0, time.time() - (workdir / name).stat().st_mtime)
        except OSError:
            continue
    return None


def tail(workdir: Path, offset: int, follow: bool) -> int:
    path = workdir / FILES["log"]
    out = sys.stdout.buffer
    while follow and not path.exists() and job_running(workdir):
        time.sleep(0.2)
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        f.seek(offset)
        while True:
            data = f.read(65536)
            if data:
                out.write(data)
                out.flush()
                continue
            if not follow or not job_running(workdir):
                if follow:
                    time.sleep(0.3)  # the agent's last lines follow its final status by a moment
                rest = f.read()  # written between the last read and the job's end
                if rest:
                    out.write(rest)
                    out.flush()
                return 0
            time.sleep(0.2)


def stop(workdir: Path, grace: float) -> int:
    _print({"stopped": stop_workdir(workdir, grace)})
    return 0


def latest(workdir: Path) -> int:
    from launchpad.errors import BadInput
    from launchpad.jobspec import JobSpec
    from launchpad.storage import open_store
    from launchpad.storage.checkpoints import latest_checkpoint

    try:
        spec = JobSpec.load(workdir / FILES["spec"])
    except BadInput:
        _print(None)  # nothing synced: no store known, no checkpoint
        return 0
    if spec.checkpoint_uri is None:
        _print(None)  # no store known, no checkpoint
        return 0
    ref = latest_checkpoint(open_store(spec.checkpoint_uri), spec.job_id)
    _print(None if ref is None else {"uri": ref.uri, "step": ref.step, "files": ref.files, "bytes": ref.bytes})
    return 0


def salvage(workdir: Path) -> int:
    from launchpad.agent.workdir import salvage as salvage_workdir

    def log(message: str) -> None:
        sys.stderr.write(f"[salvage] {message}\n")

    _print(salvage_workdir(workdir, log=log))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launchpad.ssh.remote")
    parser.add_argument("command", choices=("launch", "progress", "tail", "stop", "latest", "salvage"))
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--offset", type=int, default=0)
    parser.add_argument("--follow", action="store_true")
    parser.add_argument("--grace", type=float, default=10.0)
    args = parser.parse_args(argv)
    workdir = args.workdir
    if args.command == "launch":
        return launch(workdir)
    if args.command == "progress":
        return progress(workdir)
    if args.command == "tail":
        return tail(workdir, args.offset, args.follow)
    if args.command == "stop":
        return stop(workdir, args.grace)
    if args.command == "salvage":
        return salvage(workdir)
    return latest(workdir)


if __name__ == "__main__":
    sys.exit(main())
