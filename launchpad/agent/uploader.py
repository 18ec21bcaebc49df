"""Asynchronous checkpoint upload: the trainer hands a finished checkpoint over and trains on.

Hand-over (`launchpad.train.upload.CheckpointUploader` in agent mode): the trainer hard-links the
finished ``checkpoint-N`` folder into ``<workdir>/upload-queue/checkpoint-N.tmp`` and renames it to
``checkpoint-N`` (the rename is the "ready" signal), which takes milliseconds whatever the size. This
thread uploads each ready folder in step order with MANIFEST.json last, prunes the store to
``checkpoint.keep`` (never the newest complete one) and deletes the local copy.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..models import CheckpointRef
from ..storage import Store
from ..storage.checkpoints import prune_checkpoints, upload_checkpoint

QUEUE_DIR = "upload-queue"
_READY = re.compile(r"^checkpoint-(\d+)$")


def salvage_queue(store: Store, job_id: str, queue: Path, *, keep: int, recipe_hash: str | None,
                  log: Callable[[str], None], timeout: float = 600.0) -> list[CheckpointRef]:
    """Upload the complete hand-overs a dead agent left in `queue` (it was killed mid-upload: a crash,
    `kill -9`), oldest first with MANIFEST.json last, as the agent would have; the uploaded refs. The caller
    makes sure no agent runs on this work directory (two uploaders of one folder would race)."""
    if not ready_checkpoints(queue):
        return []
    uploader = AsyncUploader(store, job_id, queue, keep=keep, recipe_hash=recipe_hash,
                             on_uploaded=lambda ref: None, log=log)
    uploader.LEFTOVER_WAIT = timeout
    uploader.start()
    uploader.drain(timeout)
    if uploader.error:
        log(f"error: {uploader.error}")
    return list(uploader.uploaded)


def ready_checkpoints(queue: Path) -> list[tuple[int, Path]]:
    if not queue.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in queue.iterdir() if (m := _READY.match(p.name)) and p.is_dir()]
    return sorted(found)


class AsyncUploader:
    def __init__(self, store: Store, job_id: str, queue: Path, *, keep: int, recipe_hash: str | None,
                 on_uploaded: Callable[[CheckpointRef], None], log: Callable[[str], None], poll: float = 0.2):
        self.store, self.job_id, self.queue, self.keep = store, job_id, queue, keep
        self.recipe_hash, self.on_uploaded, self.log, self.poll = recipe_hash, on_uploaded, log, poll
        self.error: str | None = None
        self.uploaded: list[CheckpointRef] = []
        self._stop = threading.Event()
        self._busy = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="agent-uploader", daemon=True)

    #: how long `start` waits for checkpoints a previous agent on this machine left in the queue
    LEFTOVER_WAIT = 600.0

    def start(self) -> AsyncUploader:
        """Start uploading. A checkpoint that an earlier agent on this machine was uploading when it died
        (a crash, `kill -9`) is complete on disk (the hand-over comes after the trainer's save) and newer
        than anything in the store: it is uploaded before this returns, so the trainer resumes from it
        instead of from the one before (fewer steps lost)."""
        self.queue.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        leftovers = ready_checkpoints(self.queue)
        if leftovers:
            self.log(f"uploading {', '.join(p.name for _, p in leftovers)} left by the previous agent before resuming")
            deadline = time.monotonic() + self.LEFTOVER_WAIT
            while self.pending() and self.error is None and time.monotonic() < deadline:
                time.sleep(0.05)
        return self

    def pending(self) -> int:
        return len(ready_checkpoints(self.queue)) + (1 if self._busy.is_set() else 0)

    def drain(self, timeout: float | None = None) -> bool:
        """Upload everything queued, then stop. True if the queue is empty."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.pending() and self.error is None:
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self._stop.set()
        self._thread.join(timeout=5)
        return not ready_checkpoints(self.queue) and self.error is None

    def _loop(self) -> None:
        try:  # Linux: lower this thread's CPU priority; training must not wait for its hashing and copying
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        except (AttributeError, OSError):
            pass
        while not self._stop.is_set():
            items = ready_checkpoints(self.queue)
            if not items:
                self._stop.wait(self.poll)
                continue
            for step, folder in items:
                self._busy.set()
                try:
                    self._upload(step, folder)
                except Exception as e:  # the store went away, the disk is full...: report, keep the folder
                    self.error = f"uploading checkpoint-{step} failed: {e}"
                    self.log(f"error: {self.error}")
                    return
                finally:
                    self._busy.clear()

    def _upload(self, step: int, folder: Path) -> None:
        t0 = time.monotonic()
        ref = upload_checkpoint(self.store, folder, self.job_id, step, recipe_hash=self.recipe_hash)
        pruned = prune_checkpoints(self.store, self.job_id, self.keep)
        shutil.rmtree(folder, ignore_errors=True)
        self.uploaded.append(ref)
        extra = f"; pruned {', '.join(f'checkpoint-{s}' for s in pruned)}" if pruned else ""
        self.log(f"uploaded {ref.name} to {ref.uri} ({ref.files} files, {ref.bytes / 1e6:.1f} MB, "
                 f"{time.monotonic() - t0:.2f}s, while training went on){extra}")
        self.on_uploaded(ref)
