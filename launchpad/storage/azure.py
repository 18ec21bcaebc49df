"""The az:// store: Azure Blob Storage (block blobs) through azure-storage-blob.

URI rule (one meaning, whatever the environment):

    az://<container>[/<prefix>]             the account comes from the environment:
                                            AZURE_STORAGE_CONNECTION_STRING, else AZURE_STORAGE_ACCOUNT
    az://<container>@<account>[/<prefix>]   the account is named in the URI (as in wasbs:// and abfs://)

Credentials, first that applies: ``AZURE_STORAGE_CONNECTION_STRING`` (used only if its AccountName
is the URI's account, when the URI names one; it may carry a BlobEndpoint, e.g. Azurite's),
``AZURE_STORAGE_KEY`` for the account, else ``DefaultAzureCredential`` (azure-identity: managed
identity, ``az login``, workload identity, environment). The endpoint is
``https://<account>.blob.core.windows.net`` unless the connection string or
``AZURE_STORAGE_BLOB_ENDPOINT`` says otherwise. Keys and tokens are never logged.

- Big objects: uploads stage blocks in parallel and commit the block list last, so no partial
  blob is ever visible; downloads above `part_size` run parallel ranged GETs through
  `launchpad.storage.transfer`.
- Errors: missing blob/container or refused credentials become one StorageError line naming the URI
  and the fix; throttling, 5xx and dropped connections are StorageUnavailable, retried (bounded).

azure-storage-blob (and azure-identity) are imported when a store is opened, never at `import launchpad`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import BadInput, StorageError, StorageUnavailable
from ..plugins import hookimpl
from .local import MiB
from .objectstore import ObjectStore
from .retry import retrying, short_reason

_CRED_HINT = "set AZURE_STORAGE_CONNECTION_STRING, or sign in (`az login`, managed identity) for DefaultAzureCredential"
BLOCK_SIZE = 8 * MiB  # staged block size of uploads, and request size of streamed reads


def _parse_connection_string(conn: str) -> dict[str, str]:
    out = {}
    for part in conn.split(";"):
        name, sep, value = part.partition("=")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


class AzureBlobStore(ObjectStore):
    """A container prefix on Azure Blob Storage (or Azurite). Thread-safe: one shared client."""

    scheme = "az"
    extra, sdk_name = "azure", "azure-storage-blob"
    uri_form = "az://container/prefix or az://container@account/prefix"

    def __init__(self, root_uri: str):
        super().__init__(root_uri)
        container, _, account = self.netloc.partition("@")
        if not container:
            raise BadInput(f"no container in {root_uri}", hint=f"write {self.uri_form}")
        self.container_name, self.account = container, account or None

    # -- plumbing -------------------------------------------------------------------------------
    def _import_sdk(self):
        from azure.storage import blob

        return blob

    @property
    def container(self):
        """The SDK's ContainerClient: this store's client."""
        return self.client

    def _make_client(self):
        import requests
        from azure.core.pipeline.transport import RequestsTransport

        session = requests.Session()
        adapter = self._http_adapter()
        session.mount("https://", adapter)
        session.mount("http://", adapter)
        options = dict(
            transport=RequestsTransport(session=session, session_owner=False),
            # One quick retry inside the SDK for a dropped connection; `retrying` does the bounded rest.
            retry_policy=self._sdk.LinearRetry(backoff=0.5, random_jitter_range=0.2, retry_total=1),
            max_single_get_size=BLOCK_SIZE,
            max_chunk_get_size=BLOCK_SIZE,
            max_block_size=BLOCK_SIZE,
            max_single_put_size=BLOCK_SIZE,
            connection_timeout=10,
            read_timeout=60,
        )
        conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "").strip()
        conn_account = _parse_connection_string(conn).get("accountname") if conn else None
        if conn and (self.account is None or self.account == conn_account):
            service = self._sdk.BlobServiceClient.from_connection_string(conn, **options)
            return service.get_container_client(self.container_name)
        account = self.account or os.environ.get("AZURE_STORAGE_ACCOUNT")
        if not account:
            raise BadInput(
                f"{self.root_uri} names no storage account",
                hint="set AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT, or write az://container@account/prefix",
            )
        endpoint = os.environ.get("AZURE_STORAGE_BLOB_ENDPOINT") or f"https://{account}.blob.core.windows.net"
        key = os.environ.get("AZURE_STORAGE_KEY")
        credential: Any  # an account-key dict, or an azure-identity credential object
        if key:
            credential = {"account_name": account, "account_key": key}
        else:
            try:
                from azure.identity import DefaultAzureCredential
            except ImportError:
                raise BadInput(
                    "az:// without a connection string needs azure-identity", hint="pip install 'launchpad[azure]'"
                ) from None
            credential = DefaultAzureCredential()
        service = self._sdk.BlobServiceClient(endpoint, credential=credential, **options)
        return service.get_container_client(self.container_name)

    def _error(self, e: BaseException, key: str, doing: str) -> StorageError:
        from azure.core import exceptions as zx

        uri = self.uri(key)
        code = getattr(e, "error_code", None) or ""
        status = getattr(e, "status_code", None)
        if isinstance(e, zx.ResourceNotFoundError) or status == 404:
            if code == "ContainerNotFound":
                return StorageError(
                    f"container {self.container_name!r} does not exist ({uri})", hint="create it or fix the URI"
                )
            return StorageError(f"no such object: {uri}")
        if isinstance(e, zx.ClientAuthenticationError) or status in (401, 403):
            return StorageError(f"access denied to {uri} ({code or type(e).__name__})", hint=_CRED_HINT)
        if status is not None and (status in (408, 429) or status >= 500):
            return StorageUnavailable(f"Azure Blob is unavailable while trying to {doing} {uri} ({code or status})")
        if isinstance(
            e, (zx.ServiceRequestError, zx.ServiceResponseError, zx.IncompleteReadError, ConnectionError, TimeoutError)
        ):
            return StorageUnavailable(
                f"lost the connection to Azure Blob while trying to {doing} {uri}: {short_reason(e)}"
            )
        if isinstance(e, zx.AzureError):
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            return StorageError(f"cannot {doing} {uri}: {first}")
        return StorageError(f"cannot {doing} {uri}: {type(e).__name__}: {e}")

    def _sdk_errors(self) -> tuple[type[BaseException], ...]:
        from azure.core.exceptions import AzureError

        return (AzureError, ConnectionError, TimeoutError)

    def _blob(self, key: str):
        return self.container.get_blob_client(self._key(key))

    # -- Store ----------------------------------------------------------------------------------
    def _list_raw(self, full_prefix: str):
        for b in self.container.list_blobs(name_starts_with=full_prefix):
            yield b.name, b.size, (b.etag or "").strip('"')

    def size(self, key: str) -> int:
        props = retrying(self._call, "read", key, self._blob(key).get_blob_properties)
        return int(props.size)

    def exists(self, key: str) -> bool:
        return bool(retrying(self._call, "read", key, self._blob(key).exists))

    def get_bytes(self, key: str) -> bytes:
        return retrying(lambda: self._call("read", key, lambda: self._blob(key).download_blob().readall()))

    def put_bytes(self, key: str, data: bytes) -> None:
        retrying(self._call, "write", key, self._blob(key).upload_blob, data, overwrite=True, length=len(data))

    def get_range_to(self, key: str, start: int, end: int, out) -> None:
        self._check_range(key, start, end)
        downloader = self._call(
            "read", key, self._blob(key).download_blob, offset=start, length=end - start, max_concurrency=1
        )

        def stream() -> None:
            for chunk in downloader.chunks():  # BLOCK_SIZE requests, one after another
                out.write(chunk)

        self._call("read", key, stream)

    def put_file(self, src: Path, key: str) -> None:
        src = self._check_source(src)
        blob = self._blob(key)

        def once() -> None:
            # Above BLOCK_SIZE the SDK stages blocks (in parallel) and commits the list last:
            # until that commit, readers see the previous version or nothing.
            with open(src, "rb") as f:
                self._call(
                    "write", key, blob.upload_blob, f,
                    overwrite=True, length=src.stat().st_size, max_concurrency=min(self.workers, 8),
                )  # fmt: skip

        retrying(once)

    def delete(self, key: str) -> None:
        try:
            retrying(self._call, "delete", key, self._blob(key).delete_blob)
        except StorageError as e:
            if self._is_missing(e):
                return  # already gone (a missing container is still an error)
            raise


@hookimpl
def launchpad_register_stores(register):
    register("az", AzureBlobStore)
