"""The file:// store: a folder on a local (or mounted) filesystem.

It is the `local` provider's object store and the reference implementation of the `Store` contract:
every write lands under a temporary name in the destination folder and is renamed into place with
`os.replace`, so a reader never sees a partial object (rename is atomic within one filesystem).
Temporary names start with `.lp-tmp-` and are never listed.

Symbolic links below the root are not followed: a link in a checkpoint folder would hand out
whatever it points at (``/etc/passwd``), and a linked job folder would make `prune` delete outside
the root. Listings leave links out (they are not objects); reading, writing or deleting through one
raises StorageError naming it. The root itself may be a link: the user chose it.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..errors import BadInput, StorageError
from ..plugins import hookimpl
from . import ObjectInfo, Store
from .local import is_safe_key

TMP_PREFIX = ".lp-tmp-"


def path_of_file_uri(uri: str) -> Path:
    """The local path a file:// URI (or a bare path) names."""
    if not uri.startswith("file://"):
        return Path(uri).expanduser().resolve()
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise BadInput(f"file:// URI names another host ({parts.netloc}): {uri}", hint="use file:///absolute/path")
    return Path(unquote(parts.path))


class FileStore(Store):
    """A store rooted at a local folder. The root is created on the first write, not on open."""

    scheme = "file"

    def __init__(self, root_uri: str):
        super().__init__(root_uri)
        self.root = path_of_file_uri(self.root_uri)

    # -- keys <-> paths -------------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        """The path of `key`; refuses keys that would escape the root ('..', absolute keys) and
        paths that pass through a symbolic link below the root."""
        if not is_safe_key(key):
            raise StorageError(f"invalid object key {key!r} for {self.root_uri}")
        path = self.root
        for part in key.split("/"):
            path = path / part
            if path.is_symlink():
                raise StorageError(
                    f"refusing {self.uri(key)}: {path} is a symbolic link, and file:// stores do not follow "
                    f"links out of {self.root}; replace it with the file or folder itself"
                )
        return path

    def _write_via_tmp(self, dest: Path, write) -> None:
        """`write(tmp)` to a temporary file beside `dest`, then rename it into place: readers see
        the old file or the new one, never a part; the temporary file goes whatever happens."""
        tmp = self._tmp_beside(dest)
        try:
            write(tmp)
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def _put(self, key: str, write, doing: str) -> None:
        try:
            self._write_via_tmp(self._path(key), write)
        except OSError as e:
            raise StorageError(f"cannot {doing} {self.uri(key)}: {e.strerror or e}") from e

    def _tmp_beside(self, path: Path) -> Path:
        for attempt in range(3):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, dir=path.parent)
                break
            except FileNotFoundError:
                # A concurrent delete() pruned the folder between mkdir and mkstemp: make it again.
                if attempt == 2:
                    raise StorageError(f"cannot write to {path.parent}: it keeps disappearing") from None
            except OSError as e:
                raise StorageError(f"cannot write to {path.parent}: {e.strerror or e}") from e
        os.close(fd)
        return Path(tmp)

    # -- Store ----------------------------------------------------------------------------------
    def list(self, prefix: str = "") -> list[ObjectInfo]:
        if not self.root.is_dir():
            return []
        # Walk only the deepest folder the prefix fully names, then filter on the raw prefix, so
        # list("job/checkpoint-1") matches "job/checkpoint-10/..." too, as object stores do.
        head = prefix.rsplit("/", 1)[0].strip("/") if "/" in prefix else ""
        start = self._path(head) if head else self.root
        if not start.is_dir():
            return []
        out: list[ObjectInfo] = []
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames[:] = [d for d in dirnames if not d.startswith(TMP_PREFIX)]
            for name in filenames:
                if name.startswith(TMP_PREFIX):
                    continue
                full = Path(dirpath, name)
                if full.is_symlink():  # not an object (links to folders are never descended into)
                    continue
                key = full.relative_to(self.root).as_posix()
                if not key.startswith(prefix):
                    continue
                try:
                    st = full.stat()
                except FileNotFoundError:  # deleted while we walked
                    continue
                # mtime as the version tag: a resumed download notices a rewritten file of the same size
                out.append(ObjectInfo(key=key, size=st.st_size, etag=str(st.st_mtime_ns)))
        return out

    def get_file(self, key: str, dest: Path) -> None:
        src = self._path(key)
        if not src.is_file():
            raise StorageError(f"no such object: {self.uri(key)}")
        try:
            self._write_via_tmp(Path(dest), lambda tmp: shutil.copyfile(src, tmp))
        except FileNotFoundError as e:  # deleted since the check above
            raise StorageError(f"no such object: {self.uri(key)}") from e

    def put_file(self, src: Path, key: str) -> None:
        self._put(key, lambda tmp: shutil.copyfile(src, tmp), f"upload {src} to")

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
            raise StorageError(f"no such object: {self.uri(key)}") from e

    def put_bytes(self, key: str, data: bytes) -> None:
        self._put(key, lambda tmp: tmp.write_bytes(data), "write")

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        except IsADirectoryError:  # a "folder" is not an object; delete_prefix removes what is in it
            return
        self._prune_empty_dirs(path.parent)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except (FileNotFoundError, NotADirectoryError) as e:
            raise StorageError(f"no such object: {self.uri(key)}") from e

    def get_range(self, key: str, start: int, end: int) -> bytes:
        buf = io.BytesIO()
        self.get_range_to(key, start, end, buf)
        return buf.getvalue()

    def get_range_to(self, key: str, start: int, end: int, out) -> None:
        try:
            with open(self._path(key), "rb") as f:
                f.seek(start)
                left = end - start
                while left > 0 and (block := f.read(min(left, 1 << 20))):
                    out.write(block)
                    left -= len(block)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
            raise StorageError(f"no such object: {self.uri(key)}") from e

    def _prune_empty_dirs(self, folder: Path) -> None:
        """Remove folders emptied by deletes, up to (not including) the root, so listings stay clean."""
        while folder != self.root and self.root in folder.parents:
            try:
                folder.rmdir()
            except OSError:  # not empty (or already gone): stop climbing
                return
            folder = folder.parent


@hookimpl
def launchpad_register_stores(register):
    register("file", FileStore)
