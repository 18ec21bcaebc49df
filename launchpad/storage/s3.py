"""The s3:// store: Amazon S3 and anything that speaks its API (MinIO, R2, moto), through boto3.

URI: ``s3://<bucket>[/<prefix>]``. Keys are relative to the prefix.

- Endpoint and credentials come from boto3's default chain: ``AWS_ENDPOINT_URL`` (or
  ``AWS_ENDPOINT_URL_S3``) for another endpoint, ``AWS_PROFILE`` / ``AWS_ACCESS_KEY_ID`` / an instance
  role for credentials. Credentials are never logged or put in messages.
- Big objects: uploads are multipart (s3transfer, `part_size` parts, `workers` at once); the object
  appears only when CompleteMultipartUpload succeeds, and a failed upload is aborted. Downloads
  above `part_size` run parallel ranged GETs through `launchpad.storage.transfer`: measured faster
  than s3transfer's own download on moto (benchmarks/README.md), and it writes each part in place
  instead of queueing them through one writer thread.
- Shared with gs:// and az:// (launchpad.storage.objectstore): URI parsing, part size and workers,
  the one lazily made client, the listing loop and the install hint when boto3 is missing.
- Errors: a missing object/bucket or refused credentials become one StorageError line naming the URI
  and the fix; timeouts, throttling and dropped connections are StorageUnavailable, retried (bounded)
  by `launchpad.storage.retry.retrying` on top of botocore's own small retry budget.

boto3 is imported when a store is opened, never at `import launchpad`: without it, opening an s3://
URI raises BadInput with the install command.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import StorageError, StorageUnavailable
from ..plugins import hookimpl
from .local import MiB
from .objectstore import ObjectStore
from .retry import retrying, short_reason
from .transfer import DEFAULT_WORKERS

CHUNK = 1 * MiB  # read size when streaming a body

_TRANSIENT_CODES = {
    "500", "502", "503", "504", "InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout",
    "RequestTimeoutException", "Throttling", "ThrottlingException", "RequestLimitExceeded", "OperationAborted",
}  # fmt: skip
_AUTH_CODES = {
    "403", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken",
    "TokenRefreshRequired", "AllAccessDisabled", "AccountProblem", "UnauthorizedAccess",
}  # fmt: skip
_MISSING_KEY_CODES = {"404", "NoSuchKey", "NotFound"}
_CRED_HINT = (
    "set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, run `aws configure`, or attach an instance role"
)


class S3Store(ObjectStore):
    """A bucket prefix on S3 or an S3-compatible server. Thread-safe: one boto3 client, shared."""

    scheme = "s3"
    extra, sdk_name, uri_form = "s3", "boto3", "s3://bucket/prefix"

    def __init__(self, root_uri: str):
        super().__init__(root_uri)
        self.bucket = self.netloc
        self._pool: Any = None  # urllib3 pool of the ranged-GET fast path (urllib3 is imported lazily)
        self._plain: bool | None = None  # whether ranged GETs may use it

    # -- plumbing -------------------------------------------------------------------------------
    def _import_sdk(self):
        import boto3
        import botocore  # noqa: F401

        return boto3

    def _make_client(self):
        from botocore.config import Config

        config = Config(
            max_pool_connections=4 * DEFAULT_WORKERS,
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
            tcp_keepalive=True,
        )
        return self._sdk.session.Session().client("s3", config=config)  # sessions are not thread-safe

    def _error(self, e: BaseException, key: str, doing: str) -> StorageError:
        """One clear line for a boto3/botocore exception; StorageUnavailable when worth retrying."""
        from boto3.exceptions import Boto3Error
        from botocore import exceptions as bx

        uri = self.uri(key)
        if isinstance(e, Boto3Error):  # s3transfer's S3UploadFailedError wraps the real cause
            inner = e.__cause__ or e.__context__
            if isinstance(inner, (bx.BotoCoreError, bx.ClientError, ConnectionError, TimeoutError)):
                return self._error(inner, key, doing)
            return StorageError(f"cannot {doing} {uri}: {e}")
        if isinstance(e, (bx.NoCredentialsError, bx.PartialCredentialsError, bx.CredentialRetrievalError)):
            return StorageError(f"no AWS credentials to {doing} {uri}", hint=_CRED_HINT)
        if isinstance(e, bx.ClientError):
            err = e.response.get("Error", {})
            code = str(err.get("Code") or e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", "?"))
            if code == "NoSuchBucket":
                return StorageError(f"bucket {self.bucket!r} does not exist ({uri})", hint="create it or fix the URI")
            if code in _MISSING_KEY_CODES:
                return StorageError(f"no such object: {uri}")
            if code in _AUTH_CODES:
                return StorageError(
                    f"access denied to {uri} ({code})",
                    hint="check the credentials' s3:GetObject/PutObject/ListBucket permissions and AWS_PROFILE",
                )
            if code in _TRANSIENT_CODES:
                return StorageUnavailable(f"S3 is unavailable while trying to {doing} {uri} ({code})")
            return StorageError(f"cannot {doing} {uri}: {code}: {err.get('Message', '')}".rstrip(": "))
        transient = (
            bx.EndpointConnectionError, bx.ConnectionClosedError, bx.ReadTimeoutError, bx.ConnectTimeoutError,
            bx.ResponseStreamingError, bx.IncompleteReadError, bx.HTTPClientError, ConnectionError, TimeoutError,
        )  # fmt: skip
        if isinstance(e, transient):
            return StorageUnavailable(f"lost the connection to S3 while trying to {doing} {uri}: {short_reason(e)}")
        return StorageError(f"cannot {doing} {uri}: {e}")

    def _sdk_errors(self) -> tuple[type[BaseException], ...]:
        from boto3.exceptions import Boto3Error
        from botocore import exceptions as bx

        return (bx.BotoCoreError, bx.ClientError, Boto3Error, ConnectionError, TimeoutError)

    def _transfer_config(self):
        from boto3.s3.transfer import TransferConfig

        return TransferConfig(
            multipart_threshold=self.part_size,
            multipart_chunksize=self.part_size,
            max_concurrency=self.workers,
            use_threads=True,
        )

    # -- Store ----------------------------------------------------------------------------------
    def _list_raw(self, full_prefix: str):
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full_prefix):
            for obj in page.get("Contents", ()):
                yield obj["Key"], obj["Size"], obj.get("ETag", "").strip('"')

    def size(self, key: str) -> int:
        head = retrying(self._call, "read", key, self.client.head_object, Bucket=self.bucket, Key=self._key(key))
        return int(head["ContentLength"])

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
        except StorageUnavailable:
            raise
        except StorageError as e:
            if self._is_missing(e):
                return False
            raise
        return True

    def get_bytes(self, key: str) -> bytes:
        def once() -> bytes:
            resp = self._call("read", key, self.client.get_object, Bucket=self.bucket, Key=self._key(key))
            return self._call("read", key, resp["Body"].read)

        return retrying(once)

    def put_bytes(self, key: str, data: bytes) -> None:
        retrying(self._call, "write", key, self.client.put_object, Bucket=self.bucket, Key=self._key(key), Body=data)

    def get_range_to(self, key: str, start: int, end: int, out) -> None:
        if self._plain_gets():
            try:
                self._presigned_range_to(key, start, end, out)
                return
            except _UseBotocore:
                self._plain = False  # e.g. a bucket in another region: botocore follows the redirect
        body = self._range(key, start, end)["Body"]
        try:
            while chunk := self._call("read", key, body.read, amt=CHUNK):
                out.write(chunk)
        finally:
            body.close()

    # -- the ranged-GET fast path ------------------------------------------------------------------
    # botocore spends ~1.5 ms of CPU per request (events, signing, parsing); a presigned URL fetched
    # with urllib3 costs ~0.6 ms, which made 1,000 x 1 MiB 20% faster on moto (benchmarks/README.md),
    # so ranged reads take this path. Anything it cannot handle itself (a proxy, a redirect to another
    # region, a server that ignores Range) falls back to botocore for the rest of the store's life.
    def _plain_gets(self) -> bool:
        if self._plain is None:
            import urllib.request

            host = urlsplit(self.client.meta.endpoint_url).hostname or ""
            proxied = bool(urllib.request.getproxies()) and not urllib.request.proxy_bypass(host)
            self._plain = not proxied
        return self._plain

    @property
    def _http(self):
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    import urllib3
                    from botocore.httpsession import get_cert_path

                    self._pool = urllib3.PoolManager(
                        num_pools=4,
                        maxsize=4 * DEFAULT_WORKERS,
                        retries=False,
                        timeout=urllib3.Timeout(connect=10, read=60),
                        ca_certs=os.environ.get("AWS_CA_BUNDLE") or get_cert_path(True),
                    )
        return self._pool

    def presigned_get(self, key: str, expires: int = 3600) -> str | None:
        return self._call("read", key, self.client.generate_presigned_url, ClientMethod="get_object",
                          Params={"Bucket": self.bucket, "Key": self._key(key)}, ExpiresIn=expires)

    def _presigned_range_to(self, key: str, start: int, end: int, out) -> None:
        import urllib3
        from botocore.exceptions import ClientError

        self._check_range(key, start, end)
        url = self._call(
            "read", key, self.client.generate_presigned_url,
            ClientMethod="get_object", Params={"Bucket": self.bucket, "Key": self._key(key)}, ExpiresIn=3600,
        )  # fmt: skip
        try:
            resp = self._http.request(
                "GET", url, headers={"Range": f"bytes={start}-{end - 1}"}, preload_content=False, redirect=False
            )
        except urllib3.exceptions.HTTPError as e:
            raise StorageUnavailable(
                f"lost the connection to S3 while trying to read {self.uri(key)}: {short_reason(e)}"
            ) from e
        done = False
        try:
            if resp.status == 206 and int(resp.headers.get("Content-Length", -1)) == end - start:
                try:
                    while chunk := resp.read(CHUNK, decode_content=False):
                        out.write(chunk)
                except urllib3.exceptions.HTTPError as e:
                    raise StorageUnavailable(
                        f"lost the connection to S3 while reading {self.uri(key)}: {short_reason(e)}"
                    ) from e
                done = True
                return
            if resp.status in (200, 206, 301, 302, 307, 400):  # range ignored, redirects, region/header trouble
                raise _UseBotocore()
            body = resp.read(65536, decode_content=False)
            m = re.search(rb"<Code>([^<]+)</Code>", body)
            code = m.group(1).decode() if m else str(resp.status)
            err = {"Error": {"Code": code, "Message": ""}, "ResponseMetadata": {"HTTPStatusCode": resp.status}}
            raise self._error(ClientError(err, "GetObject"), key, "read")
        finally:
            if not done:
                resp.close()  # never hand a half-read connection back to the pool
            resp.release_conn()

    def _range(self, key: str, start: int, end: int):
        self._check_range(key, start, end)
        rng = f"bytes={start}-{end - 1}"  # HTTP ranges are inclusive
        return self._call("read", key, self.client.get_object, Bucket=self.bucket, Key=self._key(key), Range=rng)

    def put_file(self, src: Path, key: str) -> None:
        src = self._check_source(src)
        full = self._key(key)
        # s3transfer: one PUT below part_size, else multipart in parallel; on failure it aborts the
        # multipart upload, so nothing partial ever becomes visible under the key.
        retrying(
            self._call, "write", key, self.client.upload_file,
            Filename=str(src), Bucket=self.bucket, Key=full, Config=self._transfer_config(),
        )  # fmt: skip

    def delete(self, key: str) -> None:
        # S3 deletes are silent for missing keys already.
        retrying(self._call, "delete", key, self.client.delete_object, Bucket=self.bucket, Key=self._key(key))

    def delete_prefix(self, prefix: str) -> None:
        keys = [o.key for o in self.list(prefix)]
        for i in range(0, len(keys), 1000):  # DeleteObjects takes at most 1,000 keys
            batch = {"Objects": [{"Key": self.prefix + k} for k in keys[i : i + 1000]], "Quiet": True}
            resp = retrying(self._call, "delete", prefix, self.client.delete_objects, Bucket=self.bucket, Delete=batch)
            if resp.get("Errors"):
                first = resp["Errors"][0]
                raise StorageError(
                    f"cannot delete {self.uri(first.get('Key', '')[len(self.prefix) :])}: {first.get('Code')}"
                )


class _UseBotocore(Exception):
    """The fast path met something only botocore handles (redirects, proxies): use botocore."""


@hookimpl
def launchpad_register_stores(register):
    register("s3", S3Store)
