"""Fault injection for provider tests: `launchpad down` at a chosen lifecycle point, SIGKILL at a chosen
lifecycle point, a full disk, a damaged state database. Real faults, caused for real (a real plugin, a
real signal, a real tmpfs, real bytes).

The `down` hook is an ordinary launchpad plugin (installed as a distribution on PYTHONPATH) whose
`launchpad_job_event` runs the real ``launchpad down JOB`` in a subprocess when the job reaches the
event kind named by ``LAUNCHPAD_FAULT_DOWN_AT`` (e.g. ``state:SYNCING``, ``synced``,
``state:TRAINING``), once per job. Events emitted while the lifecycle holds the job's step lock make
that `down` wait for the lock: the hook waits ``LAUNCHPAD_FAULT_WAIT`` seconds (default 5) and lets the
`down` finish in the background, which is exactly "a `down` right after that step". What the `down`
printed lands in ``LAUNCHPAD_FAULT_LOG`` (JSON lines) once it ends.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_HOOK = '''
"""A launchpad plugin for tests: `launchpad down JOB` when the job reaches LAUNCHPAD_FAULT_DOWN_AT."""
import json, os, subprocess, sys, threading

from launchpad.plugins import hookimpl

_done = set()


@hookimpl
def launchpad_job_event(job, event):
    at = os.environ.get("LAUNCHPAD_FAULT_DOWN_AT")
    if not at or event.get("kind") != at or job["id"] in _done:
        return
    _done.add(job["id"])
    env = {k: v for k, v in os.environ.items() if k != "LAUNCHPAD_FAULT_DOWN_AT"}  # the down itself: no hook
    proc = subprocess.Popen([sys.executable, "-m", "launchpad", "down", job["id"], "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def record():
        out, err = proc.communicate()
        with open(os.environ["LAUNCHPAD_FAULT_LOG"], "a") as f:
            f.write(json.dumps({"at": at, "job": job["id"], "rc": proc.returncode, "stdout": out, "stderr": err}) + "\\n")

    waiter = threading.Thread(target=record)
    waiter.start()
    waiter.join(float(os.environ.get("LAUNCHPAD_FAULT_WAIT", "5")))
'''


_KILL_HOOK = '''
"""A launchpad plugin for tests: SIGKILL this launchpad process LAUNCHPAD_FAULT_KILL_DELAY seconds after
its job reaches the event kind LAUNCHPAD_FAULT_KILL_AT (once). The moment is appended to
LAUNCHPAD_FAULT_LOG (JSON lines) just before the signal."""
import json, os, signal, threading, time

from launchpad.plugins import hookimpl

_armed = []


@hookimpl
def launchpad_job_event(job, event):
    at = os.environ.get("LAUNCHPAD_FAULT_KILL_AT")
    if not at or event.get("kind") != at or _armed:
        return
    _armed.append(job["id"])
    delay = float(os.environ.get("LAUNCHPAD_FAULT_KILL_DELAY", "0"))

    def kill():
        time.sleep(delay)
        with open(os.environ["LAUNCHPAD_FAULT_LOG"], "a") as f:
            f.write(json.dumps({"at": at, "delay": delay, "job": job["id"], "ts": time.time(), "pid": os.getpid()}) + "\\n")
            f.flush()
            os.fsync(f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)

    if delay <= 0:
        kill()
    threading.Thread(target=kill, daemon=True).start()
'''


def install_kill_hook(site: Path, at: str, delay: float, log: Path) -> dict[str, str]:
    """Install the SIGKILL hook plugin under `site`; returns the environment that arms it: the launchpad
    process that runs with it kills itself `delay` seconds after its job's event `at` (e.g.
    ``provision:attempt``, ``state:SYNCING``, ``state:TRAINING``, ``teardown:start``)."""
    _install_plugin(site, "launchpad_fault_kill", _KILL_HOOK)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "LAUNCHPAD_FAULT_KILL_AT": at, "LAUNCHPAD_FAULT_KILL_DELAY": f"{delay:.3f}",
            "LAUNCHPAD_FAULT_LOG": str(log)}


def _install_plugin(site: Path, module: str, source: str) -> None:
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(source)
    dist_name = module.replace("_", "-")
    dist = site / f"{module}-0.0.1.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 0.0.1\n")
    (dist / "entry_points.txt").write_text(f"[launchpad]\n{dist_name.removeprefix('launchpad-')} = {module}\n")


def install_down_hook(site: Path, at: str, log: Path, *, wait: float = 5.0) -> dict[str, str]:
    """Install the `down` hook plugin under `site`; returns the environment that arms it at `at`."""
    _install_plugin(site, "launchpad_fault_down", _HOOK)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path, "LAUNCHPAD_FAULT_DOWN_AT": at, "LAUNCHPAD_FAULT_LOG": str(log),
            "LAUNCHPAD_FAULT_WAIT": str(wait)}


def processes_naming(path: Path) -> list[int]:
    """Live processes (not zombies) whose command line names `path` or anything under it: what is still
    running of the instances a test made there (agents, trainers)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if str(path) in cmdline and state not in ("Z", "X"):
            found.append(int(proc.name))
    return found


def kill_processes_naming(path: Path, sig: int = 9) -> list[int]:
    """SIGKILL (or `sig`) every live process naming `path`, as a crashed host would lose them. A process that
    exits between the listing and the signal is already what the caller wanted, so it is not an error (CI
    once failed on exactly that race). Returns the pids signalled."""
    import os

    signalled = []
    for pid in processes_naming(path):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue
        signalled.append(pid)
    return signalled


def fault_log(log: Path) -> list[dict]:
    import json

    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@contextmanager
def full_disk(mountpoint: Path, size: str = "1m", *, fill: bool = True) -> Iterator[Path]:
    """A real tmpfs of `size` at `mountpoint` (needs root), filled to the last byte with `fill`.
    Raises RuntimeError when this machine cannot mount one (the caller skips)."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        raise RuntimeError("mounting a tmpfs needs root")
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mountpoint)], capture_output=True)
    if res.returncode:
        raise RuntimeError(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        if fill:
            try:
                with open(mountpoint / ".filler", "wb") as f:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
            except OSError:  # ENOSPC: full, as wanted
                pass
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def damage_state_db(path: Path, how: str) -> None:
    """`truncate`: 0 bytes (and no WAL); `garbage`: not a database at all."""
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    if how == "truncate":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(b"this is not a database\n" * 100)
    else:
        raise ValueError(how)
