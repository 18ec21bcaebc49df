"""One contract, every store: file://, s3:// (moto server), gs:// (gcp-storage-emulator) and az://
(Azurite), each a real server on 127.0.0.1 started by tests/storage/conftest.py."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launchpad.errors import BadInput, StorageError, StorageUnavailable
from launchpad.storage import open_store
from launchpad.storage.checkpoints import MANIFEST, download_checkpoint, latest_checkpoint, upload_checkpoint
from launchpad.storage.transfer import PARTIAL_DIR, download_tree, upload_tree

BUCKET = "lp-test"  # created on every server by tests/storage/conftest.py

MiB = 1 << 20


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith((".lp-tmp-", PARTIAL_DIR))] if folder.exists() else []


def test_bytes_round_trip(any_store):
    s = any_store
    s.put_bytes("a/b.txt", b"hello")
    assert s.get_bytes("a/b.txt") == b"hello"
    s.put_bytes("a/b.txt", b"bye")  # overwrite
    assert s.get_bytes("a/b.txt") == b"bye"
    s.put_bytes("empty", b"")
    assert s.get_bytes("empty") == b"" and s.size("empty") == 0
    assert s.exists("a/b.txt") and not s.exists("a/b") and not s.exists("a/nope")
    assert s.size("a/b.txt") == 3


def test_files_round_trip_and_missing_key(any_store, tmp_path):
    s = any_store
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(100_000))
    s.put_file(src, "dir/obj.bin")
    dest = tmp_path / "out" / "deep" / "obj.bin"
    s.get_file("dir/obj.bin", dest)
    assert dest.read_bytes() == src.read_bytes()

    with pytest.raises(StorageError) as e:
        s.get_file("dir/missing.bin", tmp_path / "out" / "missing.bin")
    assert "no such object" in str(e.value) and s.uri("dir/missing.bin") in str(e.value)
    assert not (tmp_path / "out" / "missing.bin").exists() and _leftovers(tmp_path / "out") == []
    with pytest.raises(StorageError, match="no such object"):
        s.get_bytes("dir/missing.bin")


def test_list_with_prefix(any_store):
    s = any_store
    s.put_bytes("j/checkpoint-1/a", b"1")
    s.put_bytes("j/checkpoint-10/b/c", b"22")
    s.put_bytes("j2/x", b"333")
    assert {(o.key, o.size) for o in s.list()} == {("j/checkpoint-1/a", 1), ("j/checkpoint-10/b/c", 2), ("j2/x", 3)}
    assert {o.key for o in s.list("j/")} == {"j/checkpoint-1/a", "j/checkpoint-10/b/c"}
    assert {o.key for o in s.list("j/checkpoint-1")} == {"j/checkpoint-1/a", "j/checkpoint-10/b/c"}  # raw prefix
    assert [o.key for o in s.list("j/checkpoint-1/")] == ["j/checkpoint-1/a"]
    assert s.list("nope/") == []


def test_delete_is_silent_when_missing(any_store):
    s = any_store
    s.delete("never/was")
    s.put_bytes("d/1", b"x")
    s.put_bytes("d/2", b"y")
    s.put_bytes("keep", b"z")
    s.delete("d/1")
    s.delete("d/1")
    assert not s.exists("d/1") and s.exists("d/2")
    s.delete_prefix("d/")
    assert [o.key for o in s.list()] == ["keep"]


def test_ranged_reads(any_store):
    s = any_store
    data = bytes(range(256)) * 1000
    s.put_bytes("r.bin", data)
    assert s.get_range("r.bin", 10, 20) == data[10:20]
    assert s.get_range("r.bin", 0, len(data)) == data
    assert s.get_range("r.bin", len(data) - 1, len(data)) == data[-1:]
    buf = io.BytesIO()
    s.get_range_to("r.bin", 1000, 200_000, buf)
    assert buf.getvalue() == data[1000:200_000]
    with pytest.raises(StorageError, match="no such object"):
        s.get_range("missing.bin", 0, 1)
    with pytest.raises(StorageError, match="no such object"):
        s.get_range_to("missing.bin", 0, 1, io.BytesIO())


def test_s3_ranged_reads_through_botocore_too(server_env):
    """S3 ranged reads take a presigned-URL fast path; the botocore path (used behind a proxy or
    after a redirect) must behave the same."""
    server_env("s3")
    s = open_store(f"s3://{BUCKET}/botocore-path")
    s._plain = False
    data = os.urandom(300_000)
    s.put_bytes("r.bin", data)
    assert s.get_range("r.bin", 5, 250_000) == data[5:250_000]
    with pytest.raises(StorageError, match="no such object"):
        s.get_range("missing.bin", 0, 1)


def test_big_object_multipart_round_trip(any_store, tmp_path):
    """21 MiB with 8 MiB parts: a multipart/block/resumable upload and a parallel ranged download."""
    s = any_store
    s.part_size = 8 * MiB  # the cloud stores split above this; FileStore ignores it
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(21 * MiB))
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    s.put_file(src, "big/big.bin")
    (info,) = s.list("big/")
    assert info.size == 21 * MiB == s.size("big/big.bin")
    if s.scheme == "s3":
        assert info.etag.endswith("-3"), f"expected a 3-part multipart upload, got ETag {info.etag}"
    dest = tmp_path / "got" / "big.bin"
    s.get_file("big/big.bin", dest)
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == digest
    assert _leftovers(dest.parent) == []


def test_checkpoints_on_every_store(any_store, tmp_path):
    s = any_store
    ckpt = tmp_path / "checkpoint-5"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "adapter.safetensors").write_bytes(os.urandom(300_000))
    (ckpt / "sub" / "trainer_state.json").write_text('{"global_step": 5}')
    ref = upload_checkpoint(s, ckpt, "job1", 5, recipe_hash="abc")
    assert ref.step == 5 and ref.files == 2
    s.put_bytes("job1/checkpoint-10/adapter.safetensors", b"half-written")  # no manifest: does not exist
    latest = latest_checkpoint(s, "job1")
    assert latest is not None and latest.step == 5 and latest.uri == ref.uri
    out = download_checkpoint(s, latest, tmp_path / "restored")
    assert (out / "adapter.safetensors").read_bytes() == (ckpt / "adapter.safetensors").read_bytes()
    assert (out / "sub" / "trainer_state.json").read_text() == '{"global_step": 5}'
    assert (out / MANIFEST).exists()
    assert upload_checkpoint(s, ckpt, "job1", 5) == ref  # idempotent


class _Interrupt(Exception):
    pass


def test_download_tree_resumes_after_an_interruption(any_store, tmp_path):
    s = any_store
    src = tmp_path / "src"
    (src / "shards").mkdir(parents=True)
    (src / "big.bin").write_bytes(os.urandom(24 * MiB))
    for i in range(6):
        (src / "shards" / f"s{i}.bin").write_bytes(os.urandom(100_000 + i))
    up = upload_tree(src, s, "data")
    assert up.files == 7
    total = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    verify = {
        p.relative_to(src).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in src.rglob("*") if p.is_file()
    }

    dest = tmp_path / "dest"

    def stop_after_10_mib(done: int, _total: int) -> None:
        if done >= 10 * MiB:
            raise _Interrupt()

    with pytest.raises(_Interrupt):
        download_tree(s, "data", dest, workers=3, part_size=2 * MiB, progress=stop_after_10_mib, verify=verify)
    assert not (dest / "big.bin").exists(), "an unfinished file must not appear at its final path"
    assert (dest / PARTIAL_DIR).is_dir()

    seen: list[tuple[int, int]] = []
    stats = download_tree(
        s, "data", dest, workers=3, part_size=2 * MiB, progress=lambda d, t: seen.append((d, t)), verify=verify
    )
    assert stats.bytes < total, "the resumed download fetched everything again"
    assert stats.bytes + stats.skipped_bytes < total or stats.skipped_files < 7
    assert seen[-1] == (total, total)
    for rel, digest in verify.items():
        assert hashlib.sha256((dest / rel).read_bytes()).hexdigest() == digest
    assert not (dest / PARTIAL_DIR).exists()

    again = download_tree(s, "data", dest, workers=3, part_size=2 * MiB, verify=verify)
    assert again.files == 0 and again.bytes == 0 and again.skipped_files == 7


def test_upload_tree_skips_what_is_there(any_store, tmp_path):
    s = any_store
    src = tmp_path / "src"
    src.mkdir()
    for i in range(5):
        (src / f"f{i}").write_bytes(b"x" * (i + 1))
    (src / ".lp-tmp-half").write_bytes(b"partial")  # never uploaded
    first = upload_tree(src, s, "up/")
    assert (first.files, first.bytes) == (5, 15)
    (src / "f0").write_bytes(b"changed size")
    second = upload_tree(src, s, "up")
    assert (second.files, second.skipped_files) == (1, 4)
    assert s.get_bytes("up/f0") == b"changed size"
    assert sorted(o.key for o in s.list("up/")) == [f"up/f{i}" for i in range(5)]


# -- errors: one line naming the URI and the fix -------------------------------------------------
@pytest.mark.parametrize("scheme", ["s3", "gs", "az"])
def test_missing_bucket_says_so(scheme, server_env):
    server_env(scheme)
    s = open_store(f"{scheme}://no-such-bucket-{scheme}/p")
    with pytest.raises(StorageError) as e:
        s.get_bytes("k")
    message = str(e.value)
    assert "does not exist" in message and f"{scheme}://no-such-bucket-{scheme}/p/k" in message
    assert "create it or fix the URI" in message and "\n" not in message


@pytest.mark.parametrize("scheme", ["s3", "gs", "az"])
def test_unreachable_store_fails_in_bounded_time(scheme, server_env, monkeypatch):
    server = server_env(scheme)
    closed = f"http://127.0.0.1:{_closed_port()}"
    for k, v in server.env.items():
        monkeypatch.setenv(k, v.replace(server.endpoint, closed))
    monkeypatch.setenv("LAUNCHPAD_STORAGE_RETRIES", "2")
    s = open_store(f"{scheme}://{BUCKET}/p")
    t0 = time.monotonic()
    with pytest.raises(StorageUnavailable) as e:
        s.list()
    assert time.monotonic() - t0 < 30
    assert f"{scheme}://{BUCKET}/p" in str(e.value) and "\n" not in str(e.value)


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again when we return: connections are refused


def test_stores_load_without_their_sdks():
    """The built-in plugins import with no cloud SDK; opening a URI then names the extra to install."""
    code = """
import sys
for name in ("boto3", "botocore", "google.cloud.storage", "azure.storage.blob"):
    sys.modules[name] = None  # import of these now fails, as if not installed
from launchpad.errors import BadInput
from launchpad.plugins import get_store_classes
from launchpad.storage import open_store
print(sorted(get_store_classes()))
for uri in ("s3://b/p", "gs://b/p", "az://c/p"):
    try:
        open_store(uri)
    except BadInput as e:
        print(str(e))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == str(sorted(["az", "file", "gs", "s3"]))
    assert "pip install 'launchpad[s3]'" in lines[1]
    assert "pip install 'launchpad[gcs]'" in lines[2]
    assert "pip install 'launchpad[azure]'" in lines[3]


def test_import_launchpad_pulls_no_sdk():
    code = (
        "import sys, launchpad.cli, launchpad.storage.transfer, launchpad.plugins as p; p.get_store_classes(); "
        "print([m for m in ('boto3', 'google.cloud.storage', 'azure.storage.blob') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert out.strip() == "[]"


def test_azure_uri_names_its_account(monkeypatch):
    from launchpad.storage.azure import AzureBlobStore

    s = AzureBlobStore("az://models@myaccount/llama/8b")
    assert (s.container_name, s.account, s.prefix) == ("models", "myaccount", "llama/8b/")
    s = AzureBlobStore("az://models")
    assert (s.container_name, s.account, s.prefix) == ("models", None, "")
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_ACCOUNT", raising=False)
    with pytest.raises(BadInput, match="names no storage account"):
        s.list()


def test_azure_account_in_the_uri_with_an_account_key(server_env, monkeypatch):
    """az://container@account/prefix without a connection string: account key + explicit endpoint."""
    server = server_env("az")
    conn = dict(p.split("=", 1) for p in server.env["AZURE_STORAGE_CONNECTION_STRING"].strip(";").split(";"))
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING")
    monkeypatch.setenv("AZURE_STORAGE_KEY", conn["AccountKey"])
    monkeypatch.setenv("AZURE_STORAGE_BLOB_ENDPOINT", conn["BlobEndpoint"])
    s = open_store(f"az://{BUCKET}@{conn['AccountName']}/by-key")
    s.put_bytes("k", b"v")
    assert s.get_bytes("k") == b"v" and [o.key for o in s.list()] == ["k"]
    monkeypatch.setenv("AZURE_STORAGE_KEY", "d3Jvbmcga2V5")  # base64 of "wrong key"
    with pytest.raises(StorageError, match="access denied"):
        open_store(f"az://{BUCKET}@{conn['AccountName']}/by-key").get_bytes("k")
