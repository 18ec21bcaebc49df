"""Checkpoints with manifests, on a real file:// store: a checkpoint without a valid manifest does not exist."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from launchpad.errors import IncompleteCheckpoint, StorageError
from launchpad.models import CheckpointRef
from launchpad.storage.checkpoints import (
    MANIFEST,
    checkpoint_key,
    download_checkpoint,
    latest_checkpoint,
    list_checkpoints,
    prune_checkpoints,
    sha256_file,
    upload_checkpoint,
)
from launchpad.storage.file import FileStore

JOB = "job-1"


class RecordingStore(FileStore):
    """A real FileStore that also remembers the order in which objects became visible."""

    def __init__(self, root_uri: str):
        super().__init__(root_uri)
        self.writes: list[str] = []
        self._lock = threading.Lock()

    def put_file(self, src, key):
        super().put_file(src, key)
        with self._lock:
            self.writes.append(key)

    def put_bytes(self, key, data):
        super().put_bytes(key, data)
        with self._lock:
            self.writes.append(key)


@pytest.fixture
def store(tmp_path: Path) -> RecordingStore:
    return RecordingStore((tmp_path / "store").as_uri())


def make_local(tmp_path: Path, step: int, n: int = 5) -> Path:
    d = tmp_path / "local" / f"checkpoint-{step}"
    (d / "sub").mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (d / f"f{i}.bin").write_bytes(f"step {step} file {i} ".encode() * (i + 1) * 100)
    (d / "sub" / "nested.json").write_text(json.dumps({"step": step}))
    return d


def uploaded(store, tmp_path, step, **kw) -> CheckpointRef:
    return upload_checkpoint(store, make_local(tmp_path, step), JOB, step, **kw)


def test_upload_writes_every_file_then_the_manifest_last(store, tmp_path):
    ref = uploaded(store, tmp_path, 10, recipe_hash="abc")
    assert ref == CheckpointRef(uri=store.uri(f"{JOB}/checkpoint-10"), step=10, files=6, bytes=ref.bytes)
    assert ref.bytes == sum(p.stat().st_size for p in make_local(tmp_path, 10).rglob("*") if p.is_file())
    assert store.writes[-1] == f"{JOB}/checkpoint-10/{MANIFEST}"
    assert len(store.writes) == 7
    manifest = json.loads(store.get_bytes(f"{JOB}/checkpoint-10/{MANIFEST}"))
    assert set(manifest) == {"job_id", "step", "created_at", "recipe_hash", "files"}
    assert manifest["job_id"] == JOB and manifest["step"] == 10 and manifest["recipe_hash"] == "abc"
    local = make_local(tmp_path, 10)
    by_path = {f["path"]: f for f in manifest["files"]}
    assert "sub/nested.json" in by_path
    assert by_path["f3.bin"]["sha256"] == sha256_file(local / "f3.bin")
    assert by_path["f3.bin"]["size"] == (local / "f3.bin").stat().st_size


def test_reupload_of_a_complete_checkpoint_is_a_no_op(store, tmp_path):
    first = uploaded(store, tmp_path, 10)
    manifest_before = store.get_bytes(f"{JOB}/checkpoint-10/{MANIFEST}")
    store.writes.clear()
    again = uploaded(store, tmp_path, 10)
    assert again == first
    assert store.writes == []
    assert store.get_bytes(f"{JOB}/checkpoint-10/{MANIFEST}") == manifest_before


def test_reupload_completes_a_partial_upload(store, tmp_path):
    local = make_local(tmp_path, 10)
    store.put_file(local / "f0.bin", f"{JOB}/checkpoint-10/f0.bin")  # a crash after one file
    assert latest_checkpoint(store, JOB) is None
    ref = upload_checkpoint(store, local, JOB, 10)
    assert latest_checkpoint(store, JOB) == ref


def test_local_manifest_is_not_uploaded_as_a_file(store, tmp_path):
    local = make_local(tmp_path, 10)
    (local / MANIFEST).write_text("{}")
    ref = upload_checkpoint(store, local, JOB, 10)
    assert ref.files == 6


def test_empty_or_missing_local_folder_is_refused(store, tmp_path):
    with pytest.raises(StorageError, match="does not exist"):
        upload_checkpoint(store, tmp_path / "nope", JOB, 1)
    (tmp_path / "empty").mkdir()
    with pytest.raises(StorageError, match="empty"):
        upload_checkpoint(store, tmp_path / "empty", JOB, 1)


def test_unwritable_store_fails_clearly_and_publishes_nothing(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    bad = FileStore((blocker / "store").as_uri())
    with pytest.raises(StorageError, match="cannot write to"):
        upload_checkpoint(bad, make_local(tmp_path, 1), JOB, 1)


def test_list_is_complete_only_and_numerically_sorted(store, tmp_path):
    for step in (100, 9, 10):
        uploaded(store, tmp_path, step)
    local = make_local(tmp_path, 50)
    store.put_file(local / "f0.bin", f"{JOB}/checkpoint-50/f0.bin")  # no manifest
    uploaded(store, tmp_path, 7)
    store.put_bytes(f"other-job/checkpoint-200/{MANIFEST}", b"{}")
    assert [r.step for r in list_checkpoints(store, JOB)] == [7, 9, 10, 100]
    assert list_checkpoints(store, "other-job") == []
    assert list_checkpoints(store, "no-such-job") == []


def test_latest_never_returns_a_checkpoint_without_a_manifest(store, tmp_path):
    uploaded(store, tmp_path, 10)
    local = make_local(tmp_path, 999)
    for p in local.rglob("*"):
        if p.is_file():
            store.put_file(p, f"{JOB}/checkpoint-999/{p.relative_to(local).as_posix()}")
    assert latest_checkpoint(store, JOB).step == 10


def corrupt(store, step: int, how: str) -> None:
    key = f"{JOB}/checkpoint-{step}"
    manifest = json.loads(store.get_bytes(f"{key}/{MANIFEST}"))
    if how == "not-json":
        store.put_bytes(f"{key}/{MANIFEST}", b'{"job_id": "job-1", "st')
    elif how == "wrong-step":
        manifest["step"] = step + 1
        store.put_bytes(f"{key}/{MANIFEST}", json.dumps(manifest).encode())
    elif how == "wrong-job":
        manifest["job_id"] = "someone-else"
        store.put_bytes(f"{key}/{MANIFEST}", json.dumps(manifest).encode())
    elif how == "missing-file":
        store.delete(f"{key}/f2.bin")
    elif how == "wrong-size":
        store.put_bytes(f"{key}/f2.bin", b"short")
    elif how == "no-files":
        manifest["files"] = []
        store.put_bytes(f"{key}/{MANIFEST}", json.dumps(manifest).encode())
    elif how == "escaping-path":
        manifest["files"][0]["path"] = "../../../evil"
        store.put_bytes(f"{key}/{MANIFEST}", json.dumps(manifest).encode())
    elif how == "bad-sha":
        manifest["files"][0]["sha256"] = "xyz"
        store.put_bytes(f"{key}/{MANIFEST}", json.dumps(manifest).encode())
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(
    "how", ["not-json", "wrong-step", "wrong-job", "missing-file", "wrong-size", "no-files", "escaping-path", "bad-sha"]
)
def test_a_corrupt_or_mismatched_manifest_is_never_returned(store, tmp_path, how):
    uploaded(store, tmp_path, 10)
    uploaded(store, tmp_path, 20)
    corrupt(store, 20, how)
    assert latest_checkpoint(store, JOB).step == 10
    assert [r.step for r in list_checkpoints(store, JOB)] == [10]


def test_download_verifies_and_returns_the_folder(store, tmp_path):
    ref = uploaded(store, tmp_path, 10)
    dest = download_checkpoint(store, ref, tmp_path / "dl" / "checkpoint-10")
    assert dest == tmp_path / "dl" / "checkpoint-10"
    local = make_local(tmp_path, 10)
    for p in local.rglob("*"):
        if p.is_file():
            assert (dest / p.relative_to(local)).read_bytes() == p.read_bytes()
    assert json.loads((dest / MANIFEST).read_text())["step"] == 10
    assert [p.name for p in dest.parent.iterdir()] == ["checkpoint-10"]  # no temporary leftovers


def test_download_replaces_an_existing_folder(store, tmp_path):
    ref = uploaded(store, tmp_path, 10)
    dest = tmp_path / "dl" / "checkpoint-10"
    dest.mkdir(parents=True)
    (dest / "stale-from-a-crash").write_text("x")
    download_checkpoint(store, ref, dest)
    assert not (dest / "stale-from-a-crash").exists()
    assert (dest / "f0.bin").exists()


def test_a_same_size_corruption_is_refused_and_leaves_no_half_folder(store, tmp_path):
    ref = uploaded(store, tmp_path, 10)
    key = f"{JOB}/checkpoint-10/f3.bin"
    data = bytearray(store.get_bytes(key))
    data[7] ^= 0xFF  # same size: only the sha256 can tell
    store.put_bytes(key, bytes(data))
    assert latest_checkpoint(store, JOB) == ref  # listing checks sizes only (cheap on every store)
    dest = tmp_path / "dl" / "checkpoint-10"
    with pytest.raises(IncompleteCheckpoint, match="f3.bin.*sha256"):
        download_checkpoint(store, ref, dest)
    assert not dest.exists()
    assert list((tmp_path / "dl").iterdir()) == []


def test_download_of_a_checkpoint_without_manifest_raises(store, tmp_path):
    ref = uploaded(store, tmp_path, 10)
    store.delete(f"{JOB}/checkpoint-10/{MANIFEST}")
    with pytest.raises(IncompleteCheckpoint, match="no manifest"):
        download_checkpoint(store, ref, tmp_path / "dl" / "x")
    assert not (tmp_path / "dl" / "x").exists()


def test_download_refuses_a_manifest_that_escapes_the_folder(store, tmp_path):
    ref = uploaded(store, tmp_path, 10)
    corrupt(store, 10, "escaping-path")
    with pytest.raises(IncompleteCheckpoint, match="unsafe"):
        download_checkpoint(store, ref, tmp_path / "dl" / "x")
    assert not (tmp_path / "evil").exists()


def test_download_refuses_a_ref_from_another_store(store, tmp_path):
    other = CheckpointRef(uri="file:///elsewhere/job-1/checkpoint-10", step=10)
    with pytest.raises(StorageError, match="not in the store"):
        download_checkpoint(store, other, tmp_path / "dl")


def put_incomplete(store, tmp_path, step):
    local = make_local(tmp_path, step)
    store.put_file(local / "f0.bin", f"{checkpoint_key(JOB, step)}/f0.bin")


def steps_in_store(store) -> list[int]:
    return sorted({int(o.key.split("/")[1].split("-")[1]) for o in store.list(f"{JOB}/")})


def test_prune_keeps_newest_complete_and_a_possibly_uploading_newer_one(store, tmp_path):
    for step in (10, 20, 30):
        uploaded(store, tmp_path, step)
    put_incomplete(store, tmp_path, 5)
    put_incomplete(store, tmp_path, 25)  # older than the newest complete: a dead upload
    put_incomplete(store, tmp_path, 40)  # newer: may still be uploading
    assert prune_checkpoints(store, JOB, keep=2) == [5, 10, 25]
    assert steps_in_store(store) == [20, 30, 40]
    assert [r.step for r in list_checkpoints(store, JOB)] == [20, 30]
    assert prune_checkpoints(store, JOB, keep=2) == []  # idempotent
    assert prune_checkpoints(store, JOB, keep=1) == [20]
    assert steps_in_store(store) == [30, 40]


def test_prune_never_deletes_the_newest_complete_one(store, tmp_path):
    uploaded(store, tmp_path, 10)
    assert prune_checkpoints(store, JOB, keep=0) == []  # keep is at least one
    assert latest_checkpoint(store, JOB).step == 10


def test_prune_with_nothing_complete_deletes_nothing(store, tmp_path):
    put_incomplete(store, tmp_path, 10)
    assert prune_checkpoints(store, JOB, keep=1) == []
    assert steps_in_store(store) == [10]


def test_prune_treats_corrupt_manifests_as_incomplete(store, tmp_path):
    for step in (10, 20, 30):
        uploaded(store, tmp_path, step)
    corrupt(store, 20, "not-json")
    assert prune_checkpoints(store, JOB, keep=3) == [20]
    assert steps_in_store(store) == [10, 30]


def test_prune_deletes_the_manifest_first(store, tmp_path):
    """A reader racing a prune must never see a manifest whose files are gone: the manifest goes first."""
    uploaded(store, tmp_path, 10)
    uploaded(store, tmp_path, 20)
    deleted: list[str] = []

    class Spy(FileStore):
        def delete(self, key):
            deleted.append(key)
            super().delete(key)

    prune_checkpoints(Spy(store.uri()), JOB, keep=1)
    assert deleted[0] == f"{JOB}/checkpoint-10/{MANIFEST}"
    assert len(deleted) == 7
