"""Getting a finished local checkpoint folder into the store.

`CheckpointUploader` is the seam for issue 3: today it uploads synchronously inside the trainer's
`on_save` (training waits); the on-instance agent will replace it with one that queues the folder and
uploads while training continues. Either way the contract is the same: `submit()` is called once per
finished `checkpoint-N` folder, in step order, and the newest complete store checkpoint is reported
through `on_uploaded`.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from ..models import CheckpointRef
from ..storage import Store
from ..storage.checkpoints import prune_checkpoints, upload_checkpoint


class CheckpointUploader:
    """Synchronous: upload, then prune the store to `keep`. Raises StorageError if the store refuses."""

    def __init__(
        self,
        store: Store,
        job_id: str,
        *,
        keep: int,
        recipe_hash: str | None = None,
        on_uploaded: Callable[[CheckpointRef], None] | None = None,
        log: Callable[[str], None] = print,
    ):
        self.store = store
        self.job_id = job_id
        self.keep = keep
        self.recipe_hash = recipe_hash
        self.on_uploaded = on_uploaded
        self.log = log

    def submit(self, local_dir: Path, step: int) -> CheckpointRef | None:
        queue = os.environ.get(AGENT_QUEUE_ENV)
        if queue:
            hand_over(local_dir, Path(queue), step)
            self.log(f"saved checkpoint-{step}; the agent uploads it while training goes on")
            return None
        t0 = time.monotonic()
        ref = upload_checkpoint(self.store, local_dir, self.job_id, step, recipe_hash=self.recipe_hash)
        pruned = prune_checkpoints(self.store, self.job_id, self.keep)
        took = time.monotonic() - t0
        extra = f"; pruned {', '.join(f'checkpoint-{s}' for s in pruned)}" if pruned else ""
        self.log(f"uploaded {ref.name} to {ref.uri} ({ref.files} files, {ref.bytes / 1e6:.1f} MB, {took:.2f}s){extra}")
        if self.on_uploaded is not None:
            self.on_uploaded(ref)
        return ref

    def close(self) -> None:
        """Wait for pending uploads (none: this one is synchronous)."""


#: Set by the agent in the trainer's environment: hand finished checkpoints to it instead of uploading.
AGENT_QUEUE_ENV = "LAUNCHPAD_AGENT_UPLOAD_QUEUE"


def hand_over(local_dir: Path, queue: Path, step: int) -> None:
    """Hard-link `local_dir` into the agent's queue (milliseconds, whatever the size; falls back to a
    copy across filesystems); the final rename tells the agent the folder is complete."""
    tmp = queue / f"checkpoint-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(local_dir, tmp, copy_function=link)
    final = queue / f"checkpoint-{step}"
    shutil.rmtree(final, ignore_errors=True)  # a re-save of the same step replaces the older hand-over
    os.replace(tmp, final)
