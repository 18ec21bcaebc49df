"""Checkpoints in an object store, with manifests (the store layout every provider shares):

    <root>/<job_id>/checkpoint-<step>/<files as the trainer wrote them>
    <root>/<job_id>/checkpoint-<step>/MANIFEST.json     written LAST

    MANIFEST.json = {"job_id", "step", "created_at", "recipe_hash",
                     "files": [{"path", "size", "sha256"}, ...]}

The rule everything here follows: **a checkpoint without a valid manifest does not exist.** A
checkpoint is *complete* when its manifest is present, parses, names this job and step, and every file
it lists is in the store with the listed size. Listing and resume check sizes only (cheap on any
store); `download_checkpoint` also checks every sha256 before the checkpoint appears at its
destination, and `download_for_resume` falls back to an older checkpoint when the newest fails that
check. A manifest is read only up to `MAX_MANIFEST_BYTES`. Works with any `Store`; all functions are
safe to call while another process uploads.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import IncompleteCheckpoint, StorageError, StorageUnavailable
from ..models import CheckpointRef
from . import Store
from .local import MiB, is_safe_key, local_path, regular_files, sha256_file
from .transfer import has_ranges

MANIFEST = "MANIFEST.json"
#: A manifest lists a few hundred files (~100 bytes each); anything near this is not one of ours,
#: and reading it whole could take the machine's memory (a 1 GiB manifest cost 1.3 GB).
MAX_MANIFEST_BYTES = 64 * MiB
#: where a checkpoint's manifest goes when its files fail their sha256: it no longer counts as
#: complete, so a resume skips it and the step is uploaded again when training reaches it
CORRUPT_MANIFEST = "MANIFEST.json.corrupt"
_CKPT_DIR = re.compile(r"^checkpoint-(\d+)$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def checkpoint_key(job_id: str, step: int) -> str:
    """The store key (relative to the root) of one checkpoint folder."""
    return f"{job_id}/checkpoint-{int(step)}"


class CorruptCheckpoint(IncompleteCheckpoint):
    """A complete-looking checkpoint whose files differ from their manifest (size or sha256)."""


@dataclass(frozen=True)
class ManifestFile:
    path: str  # '/'-separated, relative to the checkpoint folder
    size: int
    sha256: str


@dataclass(frozen=True)
class Manifest:
    job_id: str
    step: int
    created_at: float
    recipe_hash: str | None
    files: tuple[ManifestFile, ...]

    def to_json(self) -> bytes:
        body = {
            "job_id": self.job_id,
            "step": self.step,
            "created_at": self.created_at,
            "recipe_hash": self.recipe_hash,
            "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in self.files],
        }
        return json.dumps(body, indent=1).encode()

    @classmethod
    def parse(cls, raw: bytes, *, job_id: str, step: int) -> Manifest:
        """Parse and sanity-check a manifest; raises IncompleteCheckpoint saying what is wrong."""
        try:
            data: Any = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise IncompleteCheckpoint(f"manifest of {job_id}/checkpoint-{step} is not JSON: {e}") from e
        where = f"manifest of {job_id}/checkpoint-{step}"
        if not isinstance(data, dict):
            raise IncompleteCheckpoint(f"{where} is not a JSON object")
        if data.get("job_id") != job_id or data.get("step") != step:
            raise IncompleteCheckpoint(f"{where} names job {data.get('job_id')!r} step {data.get('step')!r}")
        files = data.get("files")
        if not isinstance(files, list) or not files:
            raise IncompleteCheckpoint(f"{where} lists no files")
        out = []
        for entry in files:
            if not isinstance(entry, dict):
                raise IncompleteCheckpoint(f"{where} has a malformed file entry")
            path, size, digest = entry.get("path"), entry.get("size"), entry.get("sha256")
            if not (isinstance(path, str) and is_safe_key(path) and path != MANIFEST):
                raise IncompleteCheckpoint(f"{where} lists an unsafe or invalid path {path!r}")
            if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
                raise IncompleteCheckpoint(f"{where}: {path}: invalid size {size!r}")
            if not (isinstance(digest, str) and _SHA256.match(digest)):
                raise IncompleteCheckpoint(f"{where}: {path}: invalid sha256")
            out.append(ManifestFile(path, size, digest))
        created = data.get("created_at")
        return cls(
            job_id=job_id,
            step=step,
            created_at=float(created) if isinstance(created, (int, float)) else 0.0,
            recipe_hash=data.get("recipe_hash") if isinstance(data.get("recipe_hash"), str) else None,
            files=tuple(out),
        )


def read_manifest(store: Store, job_id: str, step: int, size: int | None = None) -> bytes:
    """The raw manifest of (job_id, step), never more than MAX_MANIFEST_BYTES of it in memory.
    `size` is its size from a listing, if known. Raises IncompleteCheckpoint if it is too big,
    StorageError if it cannot be read."""
    key = f"{checkpoint_key(job_id, step)}/{MANIFEST}"
    if size is None:
        size = store.size(key)

    def too_big(n: int) -> IncompleteCheckpoint:
        return IncompleteCheckpoint(
            f"manifest of {job_id}/checkpoint-{step} is {n} bytes, over the {MAX_MANIFEST_BYTES // MiB} MiB "
            "a manifest may have, so the checkpoint is not used",
            hint=f"delete {store.uri(checkpoint_key(job_id, step))}; resume then uses the newest older checkpoint",
        )

    if size > MAX_MANIFEST_BYTES:
        raise too_big(size)
    if size == 0:
        return b""
    # A ranged read stops at the size checked above even if the object grew since it was listed.
    raw = store.get_range(key, 0, size) if has_ranges(store) else store.get_bytes(key)
    if len(raw) > MAX_MANIFEST_BYTES:
        raise too_big(len(raw))
    return raw


def _ref(store: Store, manifest: Manifest) -> CheckpointRef:
    return CheckpointRef(
        uri=store.uri(checkpoint_key(manifest.job_id, manifest.step)),
        step=manifest.step,
        files=len(manifest.files),
        bytes=sum(f.size for f in manifest.files),
        created_at=manifest.created_at or None,
    )


def _scan(store: Store, job_id: str) -> dict[int, dict[str, int]]:
    """step -> {relative path: size} for every checkpoint folder of the job, complete or not."""
    prefix = f"{job_id}/"
    out: dict[int, dict[str, int]] = {}
    for obj in store.list(prefix):
        rest = obj.key[len(prefix) :]
        folder, _, rel = rest.partition("/")
        m = _CKPT_DIR.match(folder)
        if m and rel:
            out.setdefault(int(m.group(1)), {})[rel] = obj.size
    return out


def _verified_manifest(store: Store, job_id: str, step: int, present: dict[str, int]) -> Manifest | None:
    """The manifest of a complete checkpoint, or None if it is missing, corrupt or names missing files."""
    if MANIFEST not in present:
        return None
    try:
        raw = read_manifest(store, job_id, step, present[MANIFEST])
        manifest = Manifest.parse(raw, job_id=job_id, step=step)
    except (IncompleteCheckpoint, StorageError):  # corrupt, or deleted since we listed
        return None
    if all(present.get(f.path) == f.size for f in manifest.files):
        return manifest
    return None


def list_checkpoints(store: Store, job_id: str) -> list[CheckpointRef]:
    """Every complete checkpoint of `job_id`, oldest step first."""
    scan = _scan(store, job_id)
    refs = []
    for step in sorted(scan):
        manifest = _verified_manifest(store, job_id, step, scan[step])
        if manifest is not None:
            refs.append(_ref(store, manifest))
    return refs


def latest_checkpoint(store: Store, job_id: str) -> CheckpointRef | None:
    """The complete checkpoint with the highest step, or None. Never one without a valid manifest."""
    scan = _scan(store, job_id)
    for step in sorted(scan, reverse=True):
        manifest = _verified_manifest(store, job_id, step, scan[step])
        if manifest is not None:
            return _ref(store, manifest)
    return None


def upload_checkpoint(
    store: Store,
    local_dir: Path,
    job_id: str,
    step: int,
    *,
    recipe_hash: str | None = None,
    workers: int = 8,
) -> CheckpointRef:
    """Upload a finished local checkpoint folder, files in parallel, then its manifest (last).

    Idempotent: if the store already holds a complete checkpoint for (job_id, step), nothing is
    uploaded and its ref is returned. A previous partial upload is simply overwritten. A local
    `MANIFEST.json` (e.g. in a folder made by `download_checkpoint`) is not uploaded as a file.
    Raises StorageError if the store cannot be written.
    """
    local_dir = Path(local_dir)
    if not local_dir.is_dir():
        raise StorageError(f"checkpoint folder {local_dir} does not exist")
    key = checkpoint_key(job_id, step)
    existing = _verified_manifest(store, job_id, step, _scan(store, job_id).get(step, {}))
    if existing is not None:
        return _ref(store, existing)

    # Regular files only: a symbolic link raises, or its target (any file on the machine) would be uploaded.
    paths = regular_files(local_dir, skip=lambda parts: parts == (MANIFEST,))
    if not paths:
        raise StorageError(f"checkpoint folder {local_dir} is empty")

    def one(item: tuple[Path, str]) -> ManifestFile:
        path, rel = item
        entry = ManifestFile(rel, path.stat().st_size, sha256_file(path))
        store.put_file(path, f"{key}/{rel}")
        return entry

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(paths)))) as pool:
        entries = tuple(pool.map(one, paths))  # re-raises the first upload error
    manifest = Manifest(job_id, int(step), time.time(), recipe_hash, entries)
    store.put_bytes(f"{key}/{MANIFEST}", manifest.to_json())  # last: now the checkpoint exists
    return _ref(store, manifest)


def download_checkpoint(store: Store, ref: CheckpointRef, dest: Path, *, workers: int = 8) -> Path:
    """Download `ref` into the folder `dest` (created; replaced if it exists) and return `dest`.

    Files land in a temporary sibling folder; every size and sha256 is checked against the manifest
    before that folder is renamed to `dest`, so `dest` is either a complete verified checkpoint or
    untouched. The manifest is copied too. Raises IncompleteCheckpoint on any mismatch.
    """
    dest = Path(dest)
    job_id, step = _job_and_step(store, ref)
    key = checkpoint_key(job_id, step)
    try:
        raw = read_manifest(store, job_id, step)
    except IncompleteCheckpoint:
        raise
    except StorageError as e:
        raise IncompleteCheckpoint(f"{ref.uri} has no manifest") from e
    manifest = Manifest.parse(raw, job_id=job_id, step=step)

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".lp-tmp-{dest.name}-", dir=dest.parent))
    try:

        def one(f: ManifestFile) -> None:
            target = local_path(tmp, f.path, source=ref.uri)
            try:
                store.get_file(f"{key}/{f.path}", target)
            except StorageError as e:
                if isinstance(e, StorageUnavailable):
                    raise  # the store, not the checkpoint: worth another try later
                why = "missing" if e.message.startswith("no such object") else f"unreadable: {e.message}"
                raise IncompleteCheckpoint(f"{ref.uri}: {f.path} is listed in the manifest but {why}") from e
            size = target.stat().st_size
            if size != f.size:
                raise CorruptCheckpoint(f"{ref.uri}: {f.path} has {size} bytes, the manifest says {f.size}")
            if sha256_file(target) != f.sha256:
                raise CorruptCheckpoint(f"{ref.uri}: {f.path} does not match its sha256 in the manifest")

        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(manifest.files)))) as pool:
            list(pool.map(one, manifest.files))
        (tmp / MANIFEST).write_bytes(raw)
        if dest.exists():
            old = dest.with_name(f".lp-tmp-old-{dest.name}-{os.getpid()}")
            os.replace(dest, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def download_for_resume(
    store: Store, job_id: str, dest_root: Path, *, log: Callable[[str], None] = print, workers: int = 8
) -> tuple[CheckpointRef, Path] | tuple[None, None]:
    """Download the newest complete checkpoint of `job_id` that verifies into `dest_root/<name>`.

    A checkpoint whose files fail their size or sha256 check is skipped with a warning naming it,
    and its manifest is moved aside (`quarantine`), so it stops counting as complete: otherwise every
    resume would fail on it again, and the trainer's re-save of that step would be skipped as
    "already uploaded". A folder already verified on this machine (its MANIFEST.json present) is
    reused. Returns (None, None) when there is no checkpoint, or none verifies (a warning says so).
    """
    bad: list[str] = []
    for ref in reversed(list_checkpoints(store, job_id)):
        dest = Path(dest_root) / ref.name
        if (dest / MANIFEST).is_file():
            return ref, dest
        try:
            download_checkpoint(store, ref, dest, workers=workers)
        except IncompleteCheckpoint as e:
            bad.append(ref.name)
            if isinstance(e, CorruptCheckpoint):
                quarantine(store, job_id, ref.step)
                e = CorruptCheckpoint(f"{e.message}; its manifest is now {CORRUPT_MANIFEST}")
            log(f"warning: not resuming from {ref.name}: {e}; trying an older checkpoint")
            continue
        return ref, dest
    if bad:
        log(f"warning: no checkpoint of {job_id} verifies ({', '.join(bad)} failed): starting from step 0")
    return None, None


def quarantine(store: Store, job_id: str, step: int) -> None:
    """Move a corrupt checkpoint's manifest to CORRUPT_MANIFEST (kept for inspection): without its
    manifest the checkpoint is incomplete, so listings skip it and a new upload of the step replaces it."""
    key = checkpoint_key(job_id, step)
    store.put_bytes(f"{key}/{CORRUPT_MANIFEST}", read_manifest(store, job_id, step))
    store.delete(f"{key}/{MANIFEST}")


def prune_checkpoints(store: Store, job_id: str, keep: int) -> list[int]:
    """Keep the newest `keep` complete checkpoints (at least one); returns the steps deleted.

    Deleted: complete checkpoints older than the newest `keep`, and incomplete ones older than the
    newest complete one (an incomplete one newer than it may still be uploading, so it stays). Each
    checkpoint's manifest is deleted first, so a half-deleted checkpoint is never taken for complete.
    """
    keep = max(1, int(keep))
    scan = _scan(store, job_id)
    complete = [s for s in sorted(scan) if _verified_manifest(store, job_id, s, scan[s]) is not None]
    if not complete:
        return []
    newest = complete[-1]
    kept = set(complete[-keep:])
    doomed = [s for s in sorted(scan) if s not in kept and (s in complete or s < newest)]
    for step in doomed:
        key = checkpoint_key(job_id, step)
        store.delete(f"{key}/{MANIFEST}")
        for rel in scan[step]:
            if rel != MANIFEST:
                store.delete(f"{key}/{rel}")
    return doomed


def _job_and_step(store: Store, ref: CheckpointRef) -> tuple[str, int]:
    """Recover (job_id, step) from a ref's uri, which must lie under this store's root."""
    root = store.uri().rstrip("/") + "/"
    if not ref.uri.startswith(root):
        raise StorageError(f"{ref.uri} is not in the store rooted at {store.uri()}")
    job_id, _, folder = ref.uri[len(root) :].rstrip("/").rpartition("/")
    m = _CKPT_DIR.match(folder)
    if not job_id or not m or int(m.group(1)) != ref.step:
        raise StorageError(f"{ref.uri} is not a checkpoint folder (<root>/<job_id>/checkpoint-<step>)")
    return job_id, ref.step


__all__ = [
    "CORRUPT_MANIFEST",
    "MANIFEST",
    "MAX_MANIFEST_BYTES",
    "CorruptCheckpoint",
    "Manifest",
    "ManifestFile",
    "checkpoint_key",
    "download_checkpoint",
    "download_for_resume",
    "latest_checkpoint",
    "list_checkpoints",
    "prune_checkpoints",
    "quarantine",
    "read_manifest",
    "sha256_file",
    "upload_checkpoint",
]
