"""The agent's heartbeat in the job's checkpoint store (``<checkpoint.uri>/<job-id>/heartbeat.json``).

status.json stays on the instance; this small document goes where anyone with the store's credentials can
read it, so `launchpad reap` (on a laptop, a cron host, a Kubernetes CronJob) can tell what an instance is
doing without reaching it: is a trainer running, since when is the machine idle, what will its own
watchdog do about it. Written every STORE_HEARTBEAT_SECONDS (env ``LAUNCHPAD_STORE_HEARTBEAT_SECONDS``),
at once when the phase or the trainer's liveness changes, before the autostop command runs, and at the end.

Best effort: a store that cannot be reached (or a bug here) never stops the agent; the next beat tries again.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ..jobspec import JobSpec
from .status import AgentStatus

STORE_HEARTBEAT_SECONDS = 30.0
ENV_INTERVAL = "LAUNCHPAD_STORE_HEARTBEAT_SECONDS"
ENV_INSTANCE = "LAUNCHPAD_INSTANCE_ID"  # set by a provider that knows the instance's id (optional)
#: phases in which a machine is busy although no trainer runs yet
BUSY_PHASES = ("starting", "prewarm", "loading")


def interval_seconds() -> float:
    try:
        value = float(os.environ.get(ENV_INTERVAL, STORE_HEARTBEAT_SECONDS))
    except ValueError:
        return STORE_HEARTBEAT_SECONDS
    return value if value > 0 else STORE_HEARTBEAT_SECONDS


class StoreHeartbeat:
    """Writes heartbeat.json for the agent's job. `trainer_running` says whether the trainer process lives."""

    def __init__(self, spec: JobSpec, status: AgentStatus, trainer_running: Callable[[], bool],
                 *, interval: float | None = None, log: Callable[[str], None] | None = None):
        self.spec, self.status, self.trainer_running = spec, status, trainer_running
        self.interval = interval or interval_seconds()
        self.log = log or (lambda _m: None)
        self.writes = 0
        self.last_error: str | None = None
        self._store: Any = None
        self._idle_since: float | None = None
        self._last_key: tuple | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- the document --------------------------------------------------------------------------------
    def document(self) -> dict[str, Any]:
        merged = self.status.merged()
        running = bool(self.trainer_running())
        phase = str(merged.get("phase") or "starting")
        now = time.time()
        watchdog_idle = merged.get("idle_seconds")
        if running or phase in BUSY_PHASES or merged.get("busy"):
            self._idle_since = None  # a trainer, a pre-warm, a login or a busy GPU: not idle
        elif isinstance(watchdog_idle, (int, float)) and watchdog_idle > 0:
            self._idle_since = now - float(watchdog_idle)  # the watchdog's own timer, once it runs
        elif self._idle_since is None:
            self._idle_since = now  # the trainer just ended: the idle timer starts here
        autostop = self.spec.autostop
        ckpt = merged.get("last_checkpoint") or None
        return {
            "phase": phase, "step": int(merged.get("step") or 0), "total_steps": merged.get("total_steps"),
            "trainer_running": running, "idle_since": self._idle_since,
            "autostop_idle_minutes": round(autostop.seconds / 60.0, 3), "autostop_action": autostop.action,
            "autostop_command": bool(autostop.command), "autostopped": bool(merged.get("autostop")),
            "instance": os.environ.get(ENV_INSTANCE) or None,
            "last_checkpoint": ckpt if isinstance(ckpt, dict) else None,
        }

    def write_now(self) -> bool:
        """Write one heartbeat now; False (and `last_error` set) when the store refused it. Never raises."""
        with self._lock:
            try:
                from ..storage import open_store
                from ..storage.jobfiles import write_heartbeat

                doc = self.document()
                if self._store is None:
                    if not self.spec.checkpoint_uri:
                        return False
                    self._store = open_store(self.spec.checkpoint_uri)
                write_heartbeat(self._store, self.spec.job_id, doc)
                self._last_key = (doc["phase"], doc["trainer_running"], doc["autostopped"])
            except Exception as e:  # best effort: the agent outlives any store trouble
                if str(e) != self.last_error:
                    self.log(f"warning: heartbeat to the store failed: {type(e).__name__}: {e}")
                self.last_error = str(e)
                return False
            self.writes += 1
            self.last_error = None
            return True

    # -- the thread ----------------------------------------------------------------------------------
    def start(self) -> StoreHeartbeat:
        self.write_now()
        self._thread = threading.Thread(target=self._loop, name="store-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.write_now()

    def _changed(self) -> bool:
        try:
            merged = self.status.merged()
            key = (str(merged.get("phase") or "starting"), bool(self.trainer_running()), bool(merged.get("autostop")))
        except Exception:
            return False
        return key != self._last_key

    def _loop(self) -> None:
        tick = min(1.0, self.interval)
        last = time.monotonic()
        while not self._stop.wait(tick):
            if self._changed() or time.monotonic() - last >= self.interval:
                self.write_now()
                last = time.monotonic()
