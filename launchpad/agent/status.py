"""status.json as the agent writes it: the trainer's own report merged with the agent's.

The trainer writes ``trainer-status.json`` (step, loss, ...); the agent owns ``status.json`` and adds
what only it knows: its phase (prewarm, uploading, done, interrupted ...), pre-warm progress, the last
checkpoint that is *complete in the store* (not merely saved), environment versions, the idle timer.
Readers (`Provider.progress`) read only status.json and never parse logs.

A full disk never raises out of a write: `on_disk_full(path, error)` is told, the document stays in
memory and the next write (the heartbeat's, or the agent's final one after it made room) tries again.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..train.status import atomic_write_json, is_disk_full

# Phases the agent itself reports; while the trainer runs, the trainer's phase shows through.
AGENT_PHASES = ("starting", "prewarm", "uploading", "done", "failed", "interrupted")
FINAL_PHASES = ("done", "failed", "interrupted")


class AgentStatus:
    def __init__(self, workdir: Path, job_id: str, *, interval: float = 2.0,
                 on_disk_full: Callable[[Path, OSError], None] | None = None):
        self.path = workdir / "status.json"
        self.on_disk_full = on_disk_full
        self.written = True  # whether the last write reached the disk
        self.trainer_path = workdir / "trainer-status.json"
        self.interval = interval
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._agent: dict[str, Any] = {"job_id": job_id, "agent_pid": os.getpid(), "phase": "starting",
                                       "agent_started_at": time.time(), "last_checkpoint": None}
        self._phase_is_agents = True
        self._marks: dict[str, float] = {"starting": self._agent["agent_started_at"]}

    def set(self, **fields: Any) -> None:
        with self._lock:
            self._agent.update(fields)
            if "phase" in fields:
                self._phase_is_agents = fields["phase"] in AGENT_PHASES
                self._marks.setdefault(fields["phase"], time.time())
        self.write()

    def mark(self, name: str) -> None:
        """Record when `name` first happened (prewarm_done, trainer_start ...) in phase_times, and write."""
        with self._lock:
            if name in self._marks:
                return
            self._marks[name] = time.time()
        self.write()

    def release_phase(self) -> None:
        """From now on the trainer's phase shows (loading/training/saving)."""
        with self._lock:
            self._phase_is_agents = False
        self.write()

    def get(self, key: str, default: Any = None) -> Any:
        with self._lock:
            return self._agent.get(key, default)

    def trainer(self) -> dict[str, Any]:
        try:
            return json.loads(self.trainer_path.read_text())
        except (OSError, ValueError):
            return {}

    def merged(self) -> dict[str, Any]:
        doc = self.trainer()
        with self._lock:
            agent = dict(self._agent)
            agent_phase = self._phase_is_agents
            marks = dict(self._marks)
        trainer_phase = doc.get("phase")
        # when each phase began: the trainer's (loading, training, first_step) and the agent's own
        doc["phase_times"] = {**(doc.get("phase_times") or {}), **marks}
        # The agent's last_checkpoint (complete in the store) wins once it has one; before that, the
        # trainer's (the checkpoint it resumed from) is the newest complete one.
        doc.update({k: v for k, v in agent.items() if k != "phase" and not (k == "last_checkpoint" and v is None)})
        doc["trainer_phase"] = trainer_phase
        doc["phase"] = agent["phase"] if agent_phase or not trainer_phase else trainer_phase
        doc["trainer_finished"] = doc.get("finished", False)
        doc["finished"] = agent["phase"] in FINAL_PHASES  # the job, uploads included, not just the trainer
        if doc["finished"]:
            doc["phase"] = agent["phase"]
            doc["error"] = agent.get("error") if agent["phase"] != "done" else None
        elif agent.get("error") is not None:
            doc["error"] = agent["error"]
        if "env" not in doc:  # versions the environment check recorded (torch, CUDA, driver, ...)
            try:
                doc["env"] = json.loads((self.path.parent / "env.json").read_text())
            except (OSError, ValueError):
                pass
        doc["heartbeat"] = time.time()
        return doc

    def write(self) -> bool:
        """Write status.json now. False (and `on_disk_full` told) when the disk is full."""
        doc = self.merged()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.path, doc)
        except OSError as e:
            if not is_disk_full(e):
                raise
            self.written = False
            if self.on_disk_full is not None:
                self.on_disk_full(self.path, e)
            return False
        self.written = True
        return True

    def start(self) -> AgentStatus:
        self.write()
        self._thread = threading.Thread(target=self._beat, name="agent-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 1)
        self.write()

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.write()
            except OSError:  # a full disk must not kill the agent; the next beat tries again
                pass
