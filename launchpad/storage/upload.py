"""Uploading a local folder to a store, many files at once (the other direction of transfer.py).

Each store's `put_file` does multipart uploads of big files itself and makes no object visible
before it is complete, so this module only picks the files, runs them in parallel and skips what a
previous attempt already sent.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

from ..errors import StorageError
from . import Store
from .local import regular_files
from .retry import retrying
from .transfer import (
    DEFAULT_WORKERS,
    PARTIAL_DIR,
    Progress,
    TransferStats,
    _folder_prefix,
    _Progress,
)


def upload_tree(
    src: Path,
    store: Store,
    prefix: str,
    *,
    workers: int = DEFAULT_WORKERS,
    progress: Progress | None = None,
    skip_existing: bool = True,
) -> TransferStats:
    """Upload every file under the folder `src` to `prefix/<relative path>`, `workers` files at once.

    With `skip_existing`, a file whose object already exists with the same size is not uploaded
    again, so rerunning an interrupted upload sends only what is missing. Progress is counted per
    finished file. The first error stops the upload (files already sent stay) and is re-raised.
    """
    t0 = time.monotonic()
    src = Path(src)
    if not src.is_dir():
        raise StorageError(f"cannot upload {src}: not a folder")
    prefix = _folder_prefix(prefix)
    # Unfinished downloads (.lp-partial, .lp-tmp-*) are not data; a symlink raises (local.py says why).
    files = regular_files(src, skip=lambda parts: parts[0] == PARTIAL_DIR or parts[-1].startswith(".lp-tmp-"))
    local = [(path, prefix + rel, path.stat().st_size) for path, rel in files]
    existing = {o.key: o.size for o in store.list(prefix)} if skip_existing else {}
    todo = [(p, k, s) for p, k, s in local if existing.get(k) != s]
    total = sum(s for _, _, s in local)
    prog = _Progress(total, progress)
    if len(todo) < len(local):
        prog.add(total - sum(s for _, _, s in todo))
    cancel = threading.Event()

    def one(item: tuple[Path, str, int]) -> None:
        if cancel.is_set():
            return
        path, key, size = item
        try:
            retrying(store.put_file, path, key)
            prog.add(size)
        except BaseException:
            cancel.set()
            raise

    if todo:
        with ThreadPoolExecutor(max_workers=max(1, min(int(workers), len(todo))), thread_name_prefix="lp-up") as pool:
            futures = [pool.submit(one, item) for item in todo]
            wait(futures, return_when=FIRST_EXCEPTION)
            for fut in futures:
                if cancel.is_set():
                    fut.cancel()
        for fut in futures:
            error = None if fut.cancelled() else fut.exception()
            if error is not None:
                raise error
    elif progress:
        progress(total, total)
    return TransferStats(
        files=len(todo),
        bytes=sum(s for _, _, s in todo),
        seconds=time.monotonic() - t0,
        skipped_files=len(local) - len(todo),
        skipped_bytes=total - sum(s for _, _, s in todo),
    )
