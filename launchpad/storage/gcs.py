"""The gs:// store: Google Cloud Storage through google-cloud-storage.

URI: ``gs://<bucket>[/<prefix>]``. Keys are relative to the prefix.

- Credentials: Application Default Credentials (``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth
  application-default login``, or the VM's service account); project from ``GOOGLE_CLOUD_PROJECT``.
  With ``STORAGE_EMULATOR_HOST`` set (gcp-storage-emulator, fake-gcs-server) the client talks to that
  endpoint with anonymous credentials.
- Big objects: uploads are resumable uploads (the object exists only once finalized); downloads
  above `part_size` run parallel ranged GETs through `launchpad.storage.transfer`. Objects are read
  raw (no decompressive transcoding) so sizes and ranges match the stored bytes.
- Retries: the library's own retries are off (`retry=None`: its default retries for up to 120 s);
  `launchpad.storage.retry.retrying` retries whole calls instead, a bounded number of times.
- Errors: missing object/bucket or refused credentials become one StorageError line naming the URI
  and the fix; throttling, 5xx and dropped connections are StorageUnavailable, retried (bounded).

google-cloud-storage is imported when a store is opened, never at `import launchpad`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..errors import StorageError, StorageUnavailable
from ..plugins import hookimpl
from .local import MiB
from .objectstore import ObjectStore
from .retry import retrying, short_reason
from .transfer import download_file

_CRED_HINT = "set GOOGLE_APPLICATION_CREDENTIALS or run `gcloud auth application-default login`"


class _Buffered:
    """Coalesces the library's small writes (8 KiB) into `size`-byte writes to `out`."""

    def __init__(self, out, size: int = MiB):
        self.out, self.size, self.buf = out, size, bytearray()

    def write(self, data) -> int:
        self.buf += data
        if len(self.buf) >= self.size:
            self.flush()
        return len(data)

    def flush(self) -> None:
        if self.buf:
            self.out.write(bytes(self.buf))
            self.buf.clear()


class GCSStore(ObjectStore):
    """A bucket prefix on Google Cloud Storage (or its emulator). Thread-safe: one shared client."""

    scheme = "gs"
    extra, sdk_name, uri_form = "gcs", "google-cloud-storage", "gs://bucket/prefix"

    def __init__(self, root_uri: str):
        super().__init__(root_uri)
        self.bucket_name = self.netloc

    # -- plumbing -------------------------------------------------------------------------------
    def _import_sdk(self):
        import importlib

        # by name: google.cloud.compute (typed) makes mypy look for `storage` (untyped) in its namespace package
        return importlib.import_module("google.cloud.storage")

    @property
    def bucket(self):
        """The library's Bucket object: this store's client."""
        return self.client

    def _make_client(self):
        from google.auth.exceptions import GoogleAuthError

        project = os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("GCLOUD_PROJECT")
        try:
            if os.environ.get("STORAGE_EMULATOR_HOST"):
                from google.auth.credentials import AnonymousCredentials

                client = self._sdk.Client(project=project or "launchpad", credentials=AnonymousCredentials())
            else:
                client = self._sdk.Client(project=project)
        except GoogleAuthError as e:  # DefaultCredentialsError: no credentials here
            raise self._error(e, "", "open") from e
        adapter = self._http_adapter()
        for scheme in ("https://", "http://"):
            client._http.mount(scheme, adapter)
        return client.bucket(self.bucket_name)

    def _error(self, e: BaseException, key: str, doing: str) -> StorageError:
        import requests
        from google.api_core import exceptions as gx
        from google.auth import exceptions as ax
        from google.cloud.storage.exceptions import DataCorruption

        uri = self.uri(key)
        if isinstance(e, DataCorruption):
            return StorageUnavailable(f"corrupt read of {uri} (checksum mismatch): {e}")
        if isinstance(e, ax.DefaultCredentialsError):
            return StorageError(f"no Google Cloud credentials to {doing} {uri}", hint=_CRED_HINT)
        if isinstance(e, ax.RefreshError):
            return StorageError(f"Google Cloud credentials were refused while trying to {doing} {uri}", hint=_CRED_HINT)
        if isinstance(e, gx.NotFound):
            if not self._bucket_exists():
                return StorageError(
                    f"bucket {self.bucket_name!r} does not exist ({uri})", hint="create it or fix the URI"
                )
            return StorageError(f"no such object: {uri}")
        if isinstance(e, (gx.Forbidden, gx.Unauthorized)):
            return StorageError(
                f"access denied to {uri} ({type(e).__name__})",
                hint="grant the account storage.objects.get/create/list on the bucket, or " + _CRED_HINT,
            )
        if isinstance(e, (gx.TooManyRequests, gx.ServerError, gx.RequestRangeNotSatisfiable)):
            return StorageUnavailable(f"GCS is unavailable while trying to {doing} {uri} ({e.code})")
        status = getattr(getattr(e, "response", None), "status_code", None)  # google-resumable-media
        if status is not None and (status == 429 or status >= 500):
            return StorageUnavailable(f"GCS is unavailable while trying to {doing} {uri} (HTTP {status})")
        if status == 404:
            return StorageError(f"no such object: {uri}")
        if isinstance(e, (requests.exceptions.RequestException, ax.TransportError, ConnectionError, TimeoutError)):
            return StorageUnavailable(f"lost the connection to GCS while trying to {doing} {uri}: {short_reason(e)}")
        if isinstance(e, gx.GoogleAPICallError):
            return StorageError(f"cannot {doing} {uri}: {e}")
        return StorageError(f"cannot {doing} {uri}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")

    def _bucket_exists(self) -> bool:
        try:
            return bool(self.bucket.exists(retry=None))
        except Exception:  # cannot tell: say what the failed call said
            return True

    def _sdk_errors(self) -> tuple[type[BaseException], ...]:
        import requests
        from google.api_core.exceptions import GoogleAPIError
        from google.auth.exceptions import GoogleAuthError
        from google.cloud.storage.exceptions import DataCorruption, InvalidResponse

        return (
            DataCorruption, GoogleAPIError, GoogleAuthError, InvalidResponse,
            requests.exceptions.RequestException, ConnectionError, TimeoutError,
        )  # fmt: skip

    # -- Store ----------------------------------------------------------------------------------
    def _list_raw(self, full_prefix: str):
        for b in self.bucket.list_blobs(prefix=full_prefix, retry=None):
            yield b.name, b.size, str(b.generation) if b.generation else None

    def size(self, key: str) -> int:
        blob = retrying(self._call, "read", key, self.bucket.get_blob, self._key(key), retry=None)
        if blob is None:
            raise StorageError(f"no such object: {self.uri(key)}")
        return int(blob.size or 0)

    def exists(self, key: str) -> bool:
        return bool(retrying(self._call, "read", key, self.bucket.blob(self._key(key)).exists, retry=None))

    def get_bytes(self, key: str) -> bytes:
        blob = self.bucket.blob(self._key(key))
        return retrying(self._call, "read", key, blob.download_as_bytes, raw_download=True, retry=None)

    def put_bytes(self, key: str, data: bytes) -> None:
        blob = self.bucket.blob(self._key(key))
        retrying(
            self._call, "write", key, blob.upload_from_string, data, content_type="application/octet-stream", retry=None
        )

    def get_range_to(self, key: str, start: int, end: int, out) -> None:
        self._check_range(key, start, end)
        blob = self.bucket.blob(self._key(key))
        sink = _Buffered(out)
        # retry=None: a retry inside the library could resume mid-range; the caller retries ranges.
        self._call(
            "read", key, blob.download_to_file, sink,
            start=start, end=end - 1, raw_download=True, checksum=None, retry=None,
        )  # fmt: skip
        sink.flush()

    def get_file(self, key: str, dest: Path) -> None:
        dest = Path(dest)
        size = self.size(key)
        if size > self.part_size:
            download_file(self, key, dest, size=size, workers=self.workers, part_size=self.part_size)
            return
        dest.parent.mkdir(parents=True, exist_ok=True)
        blob = self.bucket.blob(self._key(key))

        def once() -> None:
            fd, tmp = tempfile.mkstemp(prefix=".lp-tmp-", dir=dest.parent)
            os.close(fd)
            try:
                # Whole-object downloads are checked against the stored crc32c/md5 by the library.
                self._call("read", key, blob.download_to_filename, tmp, raw_download=True, retry=None)
                os.replace(tmp, dest)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise

        retrying(once)

    def put_file(self, src: Path, key: str) -> None:
        src = self._check_source(src)
        # Each chunk of a resumable upload is read into memory: keep it at most 32 MiB.
        blob = self.bucket.blob(self._key(key), chunk_size=_chunk_size(min(self.part_size, 32 * MiB)))
        # Above 8 MiB the library uses a resumable upload: the object is created only when the last
        # chunk is finalized, so a failure leaves nothing under the key.
        retrying(
            self._call, "write", key, blob.upload_from_filename, str(src),
            content_type="application/octet-stream", retry=None,
        )  # fmt: skip

    def delete(self, key: str) -> None:
        from google.api_core.exceptions import NotFound

        blob = self.bucket.blob(self._key(key))
        try:
            retrying(self._call, "delete", key, blob.delete, retry=None)
        except StorageError as e:
            if isinstance(e.__cause__, NotFound) and self._is_missing(e):
                return  # already gone (a missing bucket is still an error)
            raise


def _chunk_size(part_size: int) -> int:
    """Resumable-upload chunks must be multiples of 256 KiB."""
    quantum = 256 * 1024
    return max(quantum, (part_size // quantum) * quantum)


@hookimpl
def launchpad_register_stores(register):
    register("gs", GCSStore)
