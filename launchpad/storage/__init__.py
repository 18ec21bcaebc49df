"""Object stores behind one small interface, chosen by URI scheme (file:// s3:// gs:// az://).

A store is rooted at a URI; keys are '/'-separated paths relative to that root. Stores are registered
through the `launchpad_register_stores` hook, so a plugin can add a scheme. Each SDK is imported inside
its store class, never at `import launchpad.storage`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import BadInput, StorageError


@dataclass(frozen=True)
class ObjectInfo:
    key: str  # relative to the store's root
    size: int
    #: the store's version tag (S3/Azure ETag, GCS generation) when it has one: a resumed download
    #: whose object changed since its first attempt starts over instead of mixing two versions
    etag: str | None = None


class Store(ABC):
    """One bucket/container/folder prefix. Methods are safe to call from several threads at once."""

    #: URI scheme served, without "://"
    scheme: str

    def __init__(self, root_uri: str):
        self.root_uri = root_uri.rstrip("/")

    def uri(self, key: str = "") -> str:
        return f"{self.root_uri}/{key}" if key else self.root_uri

    @abstractmethod
    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with `prefix` (recursive), in no particular order."""

    @abstractmethod
    def get_file(self, key: str, dest: Path) -> None:
        """Download one object to `dest` (parents created). Writes to a temporary name first, so a
        failed download never leaves a file at `dest`. Raises StorageError if the key is missing."""

    @abstractmethod
    def put_file(self, src: Path, key: str) -> None:
        """Upload one file. The object becomes visible only once complete (no partial objects)."""

    @abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """Read a small object whole. Raises StorageError if missing."""

    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None:
        """Write a small object whole, atomically."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Delete one object; silent if it does not exist."""

    def exists(self, key: str) -> bool:
        return any(o.key == key for o in self.list(key))

    def delete_prefix(self, prefix: str) -> None:
        for obj in self.list(prefix):
            self.delete(obj.key)

    def size(self, key: str) -> int:
        """The size in bytes of one object. Raises StorageError if it is missing."""
        for obj in self.list(key):
            if obj.key == key:
                return obj.size
        raise StorageError(f"no such object: {self.uri(key)}")

    def presigned_get(self, key: str, expires: int = 3600) -> str | None:
        """A URL that any HTTP client can GET `key` from for `expires` seconds without credentials, or
        None where this store cannot make one (then readers need the store's own SDK). Used to hand a
        host that has no SDK yet (a bare Python, before the install) the objects of the wheel cache."""
        return None

    # -- optional: ranged reads, used by launchpad.storage.transfer for parallel resumable downloads --
    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of one object (end exclusive, like a slice; 0 <= start < end <= size).
        Stores that cannot read ranges leave this unimplemented; transfers then fetch whole objects."""
        raise NotImplementedError(f"{type(self).__name__} has no ranged reads")

    def get_range_to(self, key: str, start: int, end: int, out) -> None:
        """Stream bytes [start, end) into `out.write(chunk)` without holding them all in memory.

        Not retried inside: if it fails midway, `out` has seen a prefix of the range and the caller
        retries the whole range with a fresh `out`. Transient failures raise StorageUnavailable."""
        out.write(self.get_range(key, start, end))


def scheme_of(uri: str) -> str:
    scheme = urlsplit(uri).scheme
    return scheme if len(scheme) > 1 else "file"  # plain paths (and C:\ on Windows) are files


def open_store(uri: str) -> Store:
    """The registered store for `uri`'s scheme, rooted at `uri`. A bare path means file://."""
    from ..plugins import get_store_classes

    scheme = scheme_of(uri)
    if scheme == "file" and not uri.startswith("file://"):
        uri = Path(uri).expanduser().resolve().as_uri()
    classes = get_store_classes()
    if scheme not in classes:
        hint = {"s3": "'launchpad[s3]'", "gs": "'launchpad[gcs]'", "az": "'launchpad[azure]'"}.get(scheme)
        known = ", ".join(f"{s}://" for s in sorted(classes))
        raise BadInput(
            f"no object store is installed for {scheme}:// (known: {known})",
            hint=f"pip install {hint}" if hint else None,
        )
    return classes[scheme](uri)
