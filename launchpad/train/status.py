"""status.json: what the trainer is doing, readable without parsing logs (DESIGN.md, "Heartbeat").

Keys (read by `launchpad.models.JobProgress.from_status`):
    job_id, pid, phase (loading|training|saving|done|failed), step, total_steps, epoch, loss,
    losses [[step, loss], ...] (the newest MAX_LOSSES), tokens_per_s,
    last_checkpoint {"step", "uri"} | null, resumed_from {"step", "uri"} | null,
    heartbeat (unix time of the last write), started_at, finished (bool), error (one line | null)

Every write replaces the file atomically (temp file + os.replace), so a reader never sees half a
document. A heartbeat thread rewrites it every `interval` seconds so a reader can tell a live trainer
from a dead one even while one step takes long.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

MAX_LOSSES = 2000
PHASES = ("loading", "training", "saving", "done", "failed")


class StatusWriter:
    """Thread-safe owner of one status.json. Use `update(**fields)`; `start()`/`stop()` the heartbeat."""

    def __init__(self, path: Path, job_id: str, *, interval: float = 5.0):
        self.path = Path(path)
        self.interval = interval
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        now = time.time()
        self._doc: dict[str, Any] = {
            "job_id": job_id,
            "pid": os.getpid(),
            "phase": "loading",
            "step": 0,
            "total_steps": None,
            "epoch": None,
            "loss": None,
            "losses": [],
            "tokens_per_s": None,
            "last_checkpoint": None,
            "resumed_from": None,
            "heartbeat": now,
            "started_at": now,
            "finished": False,
            "error": None,
        }

    @property
    def doc(self) -> dict[str, Any]:
        with self._lock:
            return json.loads(json.dumps(self._doc))

    def update(self, **fields: Any) -> None:
        """Merge `fields` into the document and write it now."""
        if "phase" in fields and fields["phase"] not in PHASES:
            raise ValueError(f"unknown phase {fields['phase']!r}")
        with self._lock:
            self._doc.update(fields)
            self._write_locked()

    def add_loss(self, step: int, loss: float, **fields: Any) -> None:
        """Record one logged loss (kept to the newest MAX_LOSSES) and write."""
        with self._lock:
            losses = self._doc["losses"]
            if losses and losses[-1][0] >= step:  # a resumed run re-logs nothing older than it has
                losses[:] = [pair for pair in losses if pair[0] < step]
            losses.append([int(step), float(loss)])
            del losses[:-MAX_LOSSES]
            self._doc.update(step=int(step), loss=float(loss), **fields)
            self._write_locked()

    def _write_locked(self) -> None:
        self._doc["heartbeat"] = time.time()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(self.path, self._doc)

    def start(self) -> StatusWriter:
        self.update()
        self._thread = threading.Thread(target=self._beat, name="launchpad-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 1)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.update()
            except OSError:  # a full disk must not kill training; the next beat tries again
                pass


def atomic_write_json(path: Path, doc: Any) -> None:
    """Replace `path` with `doc` as JSON in one step: a reader sees the old document or the new one."""
    fd, tmp = tempfile.mkstemp(prefix=".status-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
