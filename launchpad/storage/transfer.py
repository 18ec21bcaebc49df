"""Parallel, resumable transfers between a `Store` and a local folder: the agent's pre-warm engine.

`download_tree(store, prefix, dest)` fetches every object under `prefix` into the folder `dest`:

- **Parallel**: one pool of `workers` threads runs ranged GETs of `part_size` bytes for every object
  at once (small objects are one part). Each part is streamed straight to its place in the file with
  `os.pwrite`, so memory stays at a few MiB per worker whatever the object sizes.
- **Atomic**: an unfinished file lives in `dest/.lp-partial/`; it is renamed to its final path only
  when every part is written (and its sha256 matches, when `verify` names one). Training code that
  sees a file at its final path sees all of it.
- **Resumable**: a file already at its final path with the object's size (and sha256, when given) is
  skipped. A multi-part file keeps a journal beside its partial data: a JSON header pinning the
  object's size, etag and the part size, then one line per part written. A rerun after an interruption
  (an error, Ctrl-C, kill -9) fetches only the parts not in the journal; if the object changed or the
  part size differs, that file starts over. (The journal guards against the process dying; after a
  machine crash pass `verify`, so a part the journal lists but the disk lost is caught.)
- **Retried**: a part that fails with `StorageUnavailable` is fetched again from its start, a bounded
  number of times (`RETRY_ATTEMPTS`, exponential back-off); any other error stops the whole transfer
  at once, leaving the partial state for the next attempt, and is re-raised.
- **Progress**: `progress(done_bytes, total_bytes)` is called from worker threads but never two at
  a time, at most once per `PROGRESS_STEP` bytes and once at the end. Skipped files and resumed parts
  count as done from the start. An exception raised by the callback aborts the transfer like any
  other error (that is how a caller cancels).

`upload_tree` (launchpad.storage.upload) is the other direction; bounded retries live in
launchpad.storage.retry. Both are re-exported here for older imports.

Stores that do not implement ranged reads (`Store.get_range`) still work: their objects are fetched
whole with `get_file`, one per worker, and an interrupted file starts over.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import StorageError, StorageUnavailable
from . import ObjectInfo, Store
from .local import MiB, is_safe_key, sha256_file
from .retry import RETRY_ATTEMPTS, retry_attempts, retrying, short_reason  # noqa: F401 (re-exported)

# 128 MiB parts, as s5cmd's tuned `-p 128`: S3 serves ~100 MB/s per connection, so a part is ~1 s of
# work, and servers that copy the whole object per ranged GET (moto) pay per part. benchmarks/README.md.
DEFAULT_PART_SIZE = 128 * MiB
DEFAULT_WORKERS = 16
PARTIAL_DIR = ".lp-partial"  # under dest: unfinished files and their journals
PROGRESS_STEP = 4 * MiB

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class TransferStats:
    """What one transfer moved: `files`/`bytes` transferred by this call (a resumed file counts, only
    its missing parts count as bytes), plus what was already in place and skipped."""

    files: int
    bytes: int
    seconds: float
    skipped_files: int = 0
    skipped_bytes: int = 0

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0


def has_ranges(store: Store) -> bool:
    """Whether `store` overrides the optional ranged reads of the Store ABC."""
    cls = type(store)
    return cls.get_range_to is not Store.get_range_to or cls.get_range is not Store.get_range


# -- the engine ---------------------------------------------------------------------------------
class _Cancelled(Exception):
    """Raised inside workers once another part has failed: stop streaming, the error is elsewhere."""


class _Progress:
    def __init__(self, total: int, callback: Progress | None):
        self.total, self.callback = total, callback
        self.done = self.reported = 0
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        with self.lock:
            self.done += n
            if self.callback and (self.done - self.reported >= PROGRESS_STEP or self.done == self.total):
                self.reported = self.done
                self.callback(self.done, self.total)


class _PwriteSink:
    """The `out` of Store.get_range_to: writes each chunk at the next offset of an open file."""

    def __init__(self, fd: int, offset: int, progress: _Progress, cancel: threading.Event):
        self.fd, self.offset, self.progress, self.cancel = fd, offset, progress, cancel
        self.written = 0

    def write(self, chunk) -> int:
        if self.cancel.is_set():
            raise _Cancelled()
        view = memoryview(chunk)
        while view:
            n = os.pwrite(self.fd, view, self.offset)
            view, self.offset, self.written = view[n:], self.offset + n, self.written + n
        self.progress.add(len(chunk))
        return len(chunk)


@dataclass
class _File:
    """One object on its way to `local`: data (and journal) in the partial folder until complete."""

    info: ObjectInfo
    local: Path
    data: Path
    journal: Path | None  # None for single-part files: nothing to resume inside them
    parts: list[tuple[int, int]]  # still to fetch
    part_size: int
    sha256: str | None
    remaining: int = 0
    created: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Engine:
    def __init__(self, store: Store, workers: int, progress: _Progress):
        self.store, self.workers, self.progress = store, max(1, int(workers)), progress
        self.ranged = has_ranges(store)
        self.cancel = threading.Event()
        self.error: BaseException | None = None
        self.error_lock = threading.Lock()
        self.files_done = 0
        self.bytes_moved = 0

    def run(self, files: list[_File]) -> None:
        tasks = [(f, part) for f in files for part in f.parts]
        if not tasks:
            return
        with ThreadPoolExecutor(max_workers=min(self.workers, len(tasks)), thread_name_prefix="lp-xfer") as pool:
            futures = [pool.submit(self._task, f, part) for f, part in tasks]
            try:
                wait(futures, return_when=FIRST_EXCEPTION)
            except BaseException:  # Ctrl-C in the caller's thread: stop the workers too
                self.cancel.set()
                raise
            finally:
                if self.cancel.is_set():
                    for fut in futures:
                        fut.cancel()
        if self.error is not None:
            raise self.error

    def _task(self, f: _File, part: tuple[int, int]) -> None:
        try:
            if self.cancel.is_set():
                return
            if self.ranged:
                retrying(self._fetch_part, f, part)
            else:
                retrying(self._fetch_whole, f)
            self._part_done(f, part)
        except _Cancelled:
            pass
        except BaseException as e:
            with self.error_lock:
                if self.error is None:
                    self.error = e
            self.cancel.set()
            raise

    def _ensure_created(self, f: _File) -> None:
        with f.lock:
            if f.created:
                return
            f.data.parent.mkdir(parents=True, exist_ok=True)
            with open(f.data, "wb") as fh:
                fh.truncate(f.info.size)  # sparse: parts land anywhere in any order
            if f.journal is not None:
                f.journal.write_text(json.dumps(_header(f)) + "\n")
            f.created = True

    def _fetch_part(self, f: _File, part: tuple[int, int]) -> None:
        self._ensure_created(f)
        start, end = part
        fd = os.open(f.data, os.O_WRONLY)
        sink = _PwriteSink(fd, start, self.progress, self.cancel)
        try:
            self.store.get_range_to(f.info.key, start, end, sink)
        except StorageUnavailable:
            self.progress.add(-sink.written)  # the retry streams this part again from its start
            raise
        finally:
            os.close(fd)
        if sink.written != end - start:
            self.progress.add(-sink.written)
            raise StorageUnavailable(
                f"{self.store.uri(f.info.key)}: got {sink.written} bytes of range {start}-{end}; did it change?"
            )
        self.bytes_moved_add(sink.written)

    def _fetch_whole(self, f: _File) -> None:
        f.data.parent.mkdir(parents=True, exist_ok=True)
        if self.cancel.is_set():
            raise _Cancelled()
        self.store.get_file(f.info.key, f.data)
        self.progress.add(f.info.size)
        self.bytes_moved_add(f.info.size)

    def bytes_moved_add(self, n: int) -> None:
        with self.error_lock:
            self.bytes_moved += n

    def _part_done(self, f: _File, part: tuple[int, int]) -> None:
        with f.lock:
            if f.journal is not None:
                with open(f.journal, "a") as j:
                    j.write(f"{part[0]} {part[1]}\n")
            f.remaining -= 1
            last = f.remaining == 0
        if last:
            _finish(self.store, f)
            with self.error_lock:
                self.files_done += 1


def _header(f: _File) -> dict:
    return {"key": f.info.key, "size": f.info.size, "etag": f.info.etag, "part_size": f.part_size}


def _finish(store: Store, f: _File) -> None:
    """All parts are in: check the checksum, then move the file into place and drop its journal."""
    if f.sha256 is not None:
        got = sha256_file(f.data)
        if got != f.sha256:
            f.data.unlink(missing_ok=True)
            if f.journal is not None:
                f.journal.unlink(missing_ok=True)
            raise StorageError(f"{store.uri(f.info.key)} does not match its expected sha256 (got {got[:12]}...)")
    f.local.parent.mkdir(parents=True, exist_ok=True)
    os.replace(f.data, f.local)
    if f.journal is not None:
        f.journal.unlink(missing_ok=True)


def _split(size: int, part_size: int) -> list[tuple[int, int]]:
    if size == 0:
        return [(0, 0)]
    return [(start, min(start + part_size, size)) for start in range(0, size, part_size)]


def _journal_done(f: _File) -> set[tuple[int, int]]:
    """Parts a previous attempt finished, if its journal matches this object and its data file is intact."""
    if f.journal is None:
        return set()
    try:
        lines = f.journal.read_text().splitlines()
        intact = f.data.stat().st_size == f.info.size
    except (FileNotFoundError, NotADirectoryError):
        return set()
    try:
        if not intact or not lines or json.loads(lines[0]) != _header(f):
            return set()
    except ValueError:
        return set()
    done = set()
    wanted = set(f.parts)
    for line in lines[1:]:
        try:
            start, end = (int(x) for x in line.split())
        except ValueError:  # a torn last line from a kill: that part is fetched again
            break
        if (start, end) in wanted:
            done.add((start, end))
    return done


@dataclass
class _Plan:
    files: list[_File] = field(default_factory=list)  # still to fetch (some parts may be done)
    total: int = 0  # bytes of every object, skipped or not
    skipped_files: int = 0  # already complete at their final path
    skipped_bytes: int = 0
    resumed_bytes: int = 0  # parts a previous attempt wrote
    finished: int = 0  # files completed while planning (empty ones, fully journaled ones)


def _plan(
    store: Store, items: Iterable[tuple[ObjectInfo, Path, str | None]], partial: Path, part_size: int, skip: bool = True
) -> _Plan:
    """The work for `items` (object, final local path, expected sha256 or None); with `skip`, files
    already complete at their final path are left alone."""
    ranged = has_ranges(store)
    plan = _Plan()
    for info, local, digest in items:
        plan.total += info.size
        if skip and _complete(local, info.size, digest):
            plan.skipped_files += 1
            plan.skipped_bytes += info.size
            continue
        name = hashlib.sha1(info.key.encode()).hexdigest()
        parts = _split(info.size, part_size) if ranged and info.size > 0 else [(0, info.size)]
        journal = partial / f"{name}.journal" if len(parts) > 1 else None
        f = _File(info, local, partial / f"{name}.data", journal, parts, part_size, digest)
        finished = _journal_done(f)
        if finished:
            f.created = True
            f.parts = [p for p in parts if p not in finished]
            plan.resumed_bytes += sum(e - s for s, e in finished)
        elif journal is not None:
            journal.unlink(missing_ok=True)
        f.remaining = len(f.parts)
        if info.size == 0:  # nothing to fetch: create it now
            partial.mkdir(parents=True, exist_ok=True)
            f.data.write_bytes(b"")
        if info.size == 0 or not f.parts:  # (or every part was journaled: the last run died before the rename)
            _finish(store, f)
            plan.finished += 1
            continue
        plan.files.append(f)
    return plan


def _complete(local: Path, size: int, digest: str | None) -> bool:
    try:
        if not local.is_file() or local.stat().st_size != size:
            return False
    except OSError:
        return False
    return digest is None or sha256_file(local) == digest


def _safe_rel(key: str, prefix: str) -> str | None:
    """`key` relative to `prefix` as a local relative path, or None for folder markers; refuses keys
    that would escape the destination (`local.is_safe_key`) or land in its partial folder."""
    rel = key[len(prefix) :]
    if not rel or rel.endswith("/"):
        return None
    if not is_safe_key(rel) or rel.split("/")[0] == PARTIAL_DIR:
        raise StorageError(
            f"refusing to download {key!r}: its name would land outside the destination folder; "
            "remove or rename that object in the store"
        )
    return rel


def _folder_prefix(prefix: str) -> str:
    prefix = prefix.lstrip("/")
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


# -- public API ---------------------------------------------------------------------------------
def download_tree(
    store: Store,
    prefix: str,
    dest: Path,
    *,
    workers: int = DEFAULT_WORKERS,
    part_size: int = DEFAULT_PART_SIZE,
    progress: Progress | None = None,
    verify: dict[str, str] | None = None,
) -> TransferStats:
    """Download every object under the folder `prefix` ("" = the whole store) into `dest`, keeping
    the layout below the prefix: `prefix/a/b.bin` lands at `dest/a/b.bin`.

    `verify` maps keys to expected sha256 hex digests; a key may be given relative to `prefix` (as a
    manifest lists them) or in full. A listed key missing from the store, or a mismatch, raises
    StorageError (the bad file is discarded, never left at its final path). See the module docstring
    for resume, retry and progress rules. Returns what this call moved.
    """
    t0 = time.monotonic()
    dest = Path(dest)
    prefix = _folder_prefix(prefix)
    verify = dict(verify or {})
    objects = store.list(prefix)
    items = []
    seen: set[str] = set()
    for info in objects:
        rel = _safe_rel(info.key, prefix)
        if rel is None:
            continue
        seen.update((rel, info.key))
        items.append((info, dest.joinpath(*rel.split("/")), verify.get(rel) or verify.get(info.key)))
    missing = sorted(k for k in verify if k not in seen)
    if missing:
        raise StorageError(f"{len(missing)} expected object(s) missing under {store.uri(prefix)}, e.g. {missing[0]}")
    partial = dest / PARTIAL_DIR
    plan = _plan(store, items, partial, max(1, int(part_size)))
    prog = _Progress(plan.total, progress)
    if plan.skipped_bytes + plan.resumed_bytes:
        prog.add(plan.skipped_bytes + plan.resumed_bytes)
    engine = _Engine(store, workers, prog)
    engine.run(plan.files)
    if progress and plan.total == 0:
        progress(0, 0)
    _remove_if_empty(partial)
    return TransferStats(
        files=engine.files_done + plan.finished,
        bytes=engine.bytes_moved,
        seconds=time.monotonic() - t0,
        skipped_files=plan.skipped_files,
        skipped_bytes=plan.skipped_bytes,
    )


def download_file(
    store: Store,
    key: str,
    dest: Path,
    *,
    size: int | None = None,
    workers: int = DEFAULT_WORKERS,
    part_size: int = DEFAULT_PART_SIZE,
) -> TransferStats:
    """Download one object to `dest` with parallel ranged GETs; no partial file is ever left at
    `dest` (parts go to a temporary folder beside it, removed whatever happens). Not resumable:
    a `Store.get_file` contract helper for big objects. Raises StorageError if the key is missing."""
    t0 = time.monotonic()
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    size = retrying(store.size, key) if size is None else size
    tmp = Path(tempfile.mkdtemp(prefix=f".lp-tmp-{dest.name}-", dir=dest.parent))
    try:
        plan = _plan(store, [(ObjectInfo(key, size), dest, None)], tmp, max(1, int(part_size)), skip=False)
        _Engine(store, workers, _Progress(plan.total, None)).run(plan.files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return TransferStats(files=1, bytes=size, seconds=time.monotonic() - t0)


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


__all__ = [
    "DEFAULT_PART_SIZE",
    "DEFAULT_WORKERS",
    "PARTIAL_DIR",
    "TransferStats",
    "download_file",
    "download_tree",
    "get_file_by_ranges",
    "has_ranges",
    "retrying",
    "short_reason",
]


def __getattr__(name: str):
    # upload_tree moved to launchpad.storage.upload, which imports this module: load it lazily.
    if name == "upload_tree":
        from .upload import upload_tree

        return upload_tree
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_file_by_ranges(store: Store, key: str, dest: Path, *, part_size: int, workers: int) -> None:
    """`Store.get_file` for stores with ranged reads: big objects in parallel parts (`download_file`),
    small ones in one ranged read to a temporary file renamed into place, retried when transient."""
    size = store.size(key)
    if size > part_size:
        download_file(store, key, dest, size=size, workers=workers, part_size=part_size)
        return
    dest.parent.mkdir(parents=True, exist_ok=True)

    def once() -> None:
        fd, tmp = tempfile.mkstemp(prefix=".lp-tmp-", dir=dest.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                if size:
                    store.get_range_to(key, 0, size, f)
            if os.path.getsize(tmp) != size:
                raise StorageUnavailable(f"short read of {store.uri(key)}: did it change while being read?")
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    retrying(once)
