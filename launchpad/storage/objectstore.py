"""What the s3://, gs:// and az:// stores share: URI parsing, part size and worker count, the SDK
import with its install hint, one lazily made client shared by every thread, key checks, the
mapping of SDK errors on each call, and the listing loop.

A subclass says what differs: its SDK (`_import_sdk`), how to make its client (`_make_client`),
which SDK exceptions to map (`_sdk_errors`) and how (`_error`), and the raw listing (`_list_raw`).
The SDK is imported when a store is opened, never at `import launchpad`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import BadInput, StorageError
from . import ObjectInfo, Store
from .retry import retrying
from .transfer import DEFAULT_PART_SIZE, DEFAULT_WORKERS, get_file_by_ranges


class ObjectStore(Store):
    """A prefix of one bucket (or container) on a cloud object store. Thread-safe."""

    #: the pip extra that installs the SDK, for the hint when it is missing: "s3", "gcs", "azure"
    extra: str
    #: what the SDK is called in messages, e.g. "boto3"
    sdk_name: str
    #: how to write a URI of this store, for the hint when one is malformed
    uri_form: str

    def __init__(self, root_uri: str):
        super().__init__(root_uri)
        parts = urlsplit(self.root_uri)
        if parts.scheme != self.scheme or not parts.netloc:
            raise BadInput(f"not a {self.scheme}:// URI: {root_uri}", hint=f"write {self.uri_form}")
        #: "bucket" for s3/gs; "container" or "container@account" for az (AzureBlobStore splits it)
        self.netloc = parts.netloc
        prefix = parts.path.strip("/")
        self.prefix = f"{prefix}/" if prefix else ""
        #: objects above this are uploaded multipart and downloaded in parallel ranged parts
        self.part_size = DEFAULT_PART_SIZE
        self.workers = DEFAULT_WORKERS  # parts of one object in flight at once
        self._sdk = self._require_sdk()
        self._client = None
        self._lock = threading.Lock()

    # -- for subclasses ---------------------------------------------------------------------------
    def _import_sdk(self):
        """Import and return the SDK module; ImportError when it is not installed."""
        raise NotImplementedError

    def _make_client(self):
        """The SDK client (bucket, container) every call goes through; made once, on first use."""
        raise NotImplementedError

    def _sdk_errors(self) -> tuple[type[BaseException], ...]:
        """The exceptions `_call` maps through `_error` (anything else passes through untouched)."""
        return (ConnectionError, TimeoutError)

    def _error(self, e: BaseException, key: str, doing: str) -> StorageError:
        """One clear line for an SDK exception; StorageUnavailable when it is worth retrying."""
        raise NotImplementedError

    def _list_raw(self, full_prefix: str) -> Iterable[tuple[str, int | None, str | None]]:
        """(full object name, size, version tag) of every object whose name starts with `full_prefix`."""
        raise NotImplementedError

    # -- shared plumbing ----------------------------------------------------------------------------
    def _require_sdk(self):
        try:
            return self._import_sdk()
        except ImportError:
            raise BadInput(
                f"{self.scheme}:// needs {self.sdk_name}, which is not installed",
                hint=f"pip install 'launchpad[{self.extra}]'",
            ) from None

    @property
    def client(self):
        """The SDK client, made on first use under a lock: one per store, shared by all threads
        (the SDKs' clients are thread-safe; making one is not, and costs a connection pool)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make_client()
        return self._client

    def _key(self, key: str) -> str:
        """The full object name of `key`: the root's prefix plus the key."""
        if not key or key.startswith("/") or key.endswith("/"):
            raise StorageError(f"invalid object key {key!r} for {self.root_uri}")
        return self.prefix + key

    def _check_range(self, key: str, start: int, end: int) -> None:
        if not 0 <= start < end:
            raise StorageError(f"invalid range {start}-{end} of {self.uri(key)}")

    def _check_source(self, src: Path) -> Path:
        src = Path(src)
        if not src.is_file():
            raise StorageError(f"cannot upload {src}: not a file")
        return src

    def _call(self, doing: str, key: str, fn, /, *args, **kwargs):
        """One SDK call with its errors mapped (no retry here: callers wrap with `retrying`)."""
        try:
            return fn(*args, **kwargs)
        except self._sdk_errors() as e:
            raise self._error(e, key, doing) from e

    @staticmethod
    def _is_missing(e: StorageError) -> bool:
        return e.message.startswith("no such object")

    @staticmethod
    def _http_adapter():
        """A requests adapter with a pool for many parts at once: the default of 10 connections
        would be closed and reopened over and over by `workers` threads."""
        import requests.adapters

        return requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=4 * DEFAULT_WORKERS)

    # -- Store ----------------------------------------------------------------------------------------
    def list(self, prefix: str = "") -> list[ObjectInfo]:
        def once() -> list[ObjectInfo]:
            raw = self._call("list", prefix, lambda: list(self._list_raw(self.prefix + prefix)))
            out = []
            for name, size, etag in raw:
                key = name[len(self.prefix) :]
                if key and not key.endswith("/"):  # "folder" markers are not objects
                    out.append(ObjectInfo(key, int(size or 0), etag or None))
            return out

        return retrying(once)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        import io

        def once() -> bytes:
            buf = io.BytesIO()
            self.get_range_to(key, start, end, buf)
            return buf.getvalue()

        return retrying(once)

    def get_file(self, key: str, dest: Path) -> None:
        get_file_by_ranges(self, key, Path(dest), part_size=self.part_size, workers=self.workers)
