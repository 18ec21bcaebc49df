"""Where store keys meet the local disk: the one check that turns a key into a local path, the one
walk of a local folder to upload, and the sha256 of a file.

Keys come from listings and manifests, which a hostile or corrupt store controls: a key such as
``../../.bashrc`` must never become a path outside the folder it is downloaded into. Every place
that joins a key onto a local folder goes through `local_path`. Symbolic links are refused on both
sides: uploading through one would publish whatever it points at (``/etc/passwd``), and following
one inside a file:// store would read or delete outside the store's root.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ..errors import StorageError

MiB = 1 << 20


def is_safe_key(rel: str) -> bool:
    """Whether the '/'-separated relative key `rel` stays inside any folder it is joined onto:
    not empty, not absolute, no '.', '..' or empty segments, no backslashes, NULs or drive letters."""
    if not rel or rel.startswith("/") or "\\" in rel or "\0" in rel:
        return False
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return False
    return ":" not in parts[0]  # "C:x" would be a drive on Windows


def local_path(dest: Path, rel: str, *, source: str = "") -> Path:
    """`dest` joined with the relative key `rel`, or StorageError if the key would land outside
    `dest`. `source` (a URI) names where the key came from in the message."""
    if not is_safe_key(rel):
        where = f" from {source}" if source else ""
        raise StorageError(
            f"refusing the object name {rel!r}{where}: it would land outside {dest}; "
            "remove or rename that object in the store"
        )
    return Path(dest).joinpath(*rel.split("/"))


def regular_files(folder: Path, *, skip=lambda rel: False) -> list[tuple[Path, str]]:
    """(path, '/'-separated relative path) of every file under `folder`, sorted; `skip(rel_parts)`
    leaves a file or folder out. Raises StorageError at the first symbolic link below `folder`
    (the folder itself may be one): its target, not the link, would be uploaded."""
    folder = Path(folder)
    out: list[tuple[Path, str]] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        base = Path(dirpath)
        rel_dir = base.relative_to(folder).parts
        for name in sorted(dirnames + filenames):
            path = base / name
            if skip(rel_dir + (name,)):
                if name in dirnames:
                    dirnames.remove(name)
                continue
            if path.is_symlink():
                raise StorageError(
                    f"refusing to upload {path}: it is a symbolic link (to {os.readlink(path)}); "
                    "replace it with the file or folder itself"
                )
            if name in filenames and path.is_file():
                out.append((path, "/".join(rel_dir + (name,))))
    out.sort(key=lambda item: item[1])
    return out


def sha256_file(path: Path, chunk: int = 4 * MiB) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
