"""The idle watchdog: the first cause of surprise bills is a GPU machine that nobody uses.

Idle means all three at once: no trainer process, GPU utilisation under a threshold (when `nvidia-smi`
exists), and no interactive login sessions. After `idle_seconds` of continuous idleness the configured
action runs: the provider's self-stop command (e.g. `shutdown -h now`, which terminates an EC2 instance
launched with InstanceInitiatedShutdownBehavior=terminate), or, where none is configured (the `local`
provider: nothing bills), the agent simply ends. It needs no client: it runs on the instance.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..jobspec import AutostopSpec
    from .status import AgentStatus


def login_sessions() -> int:
    """Interactive sessions as utmp records them (`who`)."""
    if shutil.which("who") is None:
        return 0
    try:
        out = subprocess.run(["who"], capture_output=True, text=True, timeout=5).stdout
    except (subprocess.SubprocessError, OSError):
        return 0
    return sum(1 for line in out.splitlines() if line.strip())


def gpu_utilization() -> float | None:
    """The busiest GPU's utilisation in percent, or None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        values = [float(v) for v in out.split() if v.strip()]
    except (subprocess.SubprocessError, OSError, ValueError):
        return None
    return max(values) if values else 0.0


class IdleWatchdog:
    def __init__(self, idle_seconds: float, *, trainer_running: Callable[[], bool],
                 gpu_threshold: float = 10.0, sessions: Callable[[], int] = login_sessions,
                 gpu: Callable[[], float | None] = gpu_utilization, clock: Callable[[], float] = time.monotonic):
        self.idle_seconds = idle_seconds
        self.trainer_running = trainer_running
        self.gpu_threshold = gpu_threshold
        self.sessions, self.gpu, self.clock = sessions, gpu, clock
        self.idle_since: float | None = None
        self.reason_busy: str | None = None

    def busy_reason(self) -> str | None:
        if self.trainer_running():
            return "a trainer is running"
        util = self.gpu()
        if util is not None and util >= self.gpu_threshold:
            return f"GPU utilisation {util:.0f}%"
        n = self.sessions()
        if n:
            return f"{n} login session(s)"
        return None

    def idle_for(self) -> float:
        """Check once; seconds of continuous idleness so far (0 when busy)."""
        self.reason_busy = self.busy_reason()
        now = self.clock()
        if self.reason_busy is not None:
            self.idle_since = None
            return 0.0
        if self.idle_since is None:
            self.idle_since = now
        return now - self.idle_since

    def due(self) -> bool:
        return self.idle_for() >= self.idle_seconds


def run_autostop(workdir: Path, autostop: AutostopSpec, idle: float, *, status: AgentStatus,
                 log: Callable[[str], None], write: Callable[[Path, Callable[[], Any]], bool],
                 before: Callable[[], Any] | None = None) -> None:
    """The idle machine's end: record it (autostopped.json, status.json), tell `before` (the store
    heartbeat, which must say so before the machine goes), then run the provider's argv, if any."""
    action, command = autostop.action, autostop.command
    record = {"action": action, "idle_seconds": round(idle, 1), "at": time.time(),
              "command": list(command) if command else None}
    path = workdir / "autostopped.json"
    write(path, lambda: path.write_text(json.dumps(record)))
    status.set(autostop=record)
    if before is not None:
        before()
    if not command:
        log(f"idle for {idle:.0f}s: nothing bills here, so the agent just ends ({action})")
        return
    log(f"idle for {idle:.0f}s: running the {action} command")
    try:  # argv list from the provider: never through a shell
        subprocess.run(list(command), check=False, timeout=120, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as e:
        log(f"error: the {action} command failed: {e}")
