"""Issue 10: what a hostile or corrupt store (or checkpoint folder) must not be able to do.

- item 9: store keys must not escape the local folder they are downloaded into (`resolve_base_model`,
  used by `launchpad export`, wrote `dest / obj.key`); one function, `storage.local.local_path`, checks
  every key that becomes a local path.
- item 12: file:// stores and checkpoint folders must not follow symbolic links.
- item 13: MANIFEST.json is read with a size cap, on every store.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launchpad.errors import IncompleteCheckpoint, StorageError
from launchpad.storage import open_store
from launchpad.storage.checkpoints import (
    MANIFEST,
    checkpoint_key,
    download_checkpoint,
    latest_checkpoint,
    list_checkpoints,
    prune_checkpoints,
    upload_checkpoint,
)
from launchpad.storage.local import local_path

JOB = "job-h"


def make_local(root: Path, step: int) -> Path:
    d = root / f"checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "weights.bin").write_bytes(b"w" * 1000)
    (d / "config.json").write_text("{}")
    return d


# -- item 9: keys that would escape ------------------------------------------------------------------
@pytest.mark.parametrize("key", ["../x", "a/../../x", "/etc/x", "a//b", "./a", "a\\..\\x", "C:x", ""])
def test_item9_local_path_refuses_keys_that_leave_the_folder(tmp_path, key):
    """Item 9: the one key -> local path check refuses every escaping shape, naming the key."""
    with pytest.raises(StorageError, match="outside"):
        local_path(tmp_path, key, source="s3://b/m")
    assert local_path(tmp_path, "a/b.bin") == tmp_path / "a" / "b.bin"


def test_item9_base_model_keys_cannot_escape_the_model_cache(server_env, tmp_path):
    """Item 9: an s3:// base model whose listing holds `../../x` (moto keeps such names, as S3 does)
    is refused with a clear error; nothing is written outside the cache folder."""
    from launchpad.train.trainer import resolve_base_model

    server_env("s3")
    uri = f"s3://lp-test/hostile-{os.getpid()}-{tmp_path.name}"
    store = open_store(uri)
    store.put_bytes("config.json", b"{}")
    store.put_bytes("w/../../../../escaped.txt", b"pwned")
    work = tmp_path / "deep" / "work"
    with pytest.raises(StorageError, match="escaped.txt.*outside"):
        resolve_base_model(uri, work)
    assert not any(p.name == "escaped.txt" for p in tmp_path.rglob("*"))


# -- item 12: symbolic links --------------------------------------------------------------------------
def test_item12_a_symlink_in_a_store_checkpoint_is_not_downloaded(tmp_path):
    """Item 12: a checkpoint file replaced by a link to a file outside the store is never read."""
    store = open_store((tmp_path / "store").as_uri())
    ref = upload_checkpoint(store, make_local(tmp_path / "local", 10), JOB, 10)
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"s" * 1000)  # same size as weights.bin, so only the link gives it away
    target = tmp_path / "store" / JOB / "checkpoint-10" / "weights.bin"
    target.unlink()
    target.symlink_to(secret)

    assert latest_checkpoint(store, JOB) is None  # a link is not an object: the checkpoint is incomplete
    with pytest.raises(StorageError, match="symbolic link"):
        store.get_bytes(f"{JOB}/checkpoint-10/weights.bin")
    with pytest.raises(IncompleteCheckpoint, match="symbolic link"):
        download_checkpoint(store, ref, tmp_path / "dl")
    assert not (tmp_path / "dl").exists()


def test_item12_prune_does_not_delete_through_a_symlinked_job_folder(tmp_path):
    """Item 12: <root>/<job> linking elsewhere: prune refuses, and nothing outside the root is deleted."""
    elsewhere = tmp_path / "elsewhere"
    outside = open_store(elsewhere.as_uri())
    for step in (1, 2, 3):
        upload_checkpoint(outside, make_local(tmp_path / "local", step), JOB, step)
    root = tmp_path / "store"
    root.mkdir()
    (root / JOB).symlink_to(elsewhere / JOB)
    store = open_store(root.as_uri())
    with pytest.raises(StorageError, match="symbolic link"):
        prune_checkpoints(store, JOB, keep=1)
    with pytest.raises(StorageError, match="symbolic link"):
        store.delete(f"{checkpoint_key(JOB, 1)}/{MANIFEST}")
    with pytest.raises(StorageError, match="symbolic link"):
        store.put_bytes(f"{JOB}/x", b"x")
    assert [r.step for r in list_checkpoints(outside, JOB)] == [1, 2, 3]


def test_item12_upload_checkpoint_refuses_a_symlink_in_the_local_folder(tmp_path):
    """Item 12: a link inside the local checkpoint folder would upload its target: refused, nothing published."""
    store = open_store((tmp_path / "store").as_uri())
    local = make_local(tmp_path / "local", 10)
    (tmp_path / "secret").write_text("root:x:0:0")
    (local / "passwd").symlink_to(tmp_path / "secret")
    with pytest.raises(StorageError, match="passwd.*symbolic link"):
        upload_checkpoint(store, local, JOB, 10)
    assert store.list("") == []


def test_item12_upload_tree_refuses_a_symlinked_folder(tmp_path):
    """Item 12: the same for upload_tree (a linked folder would publish a whole tree from elsewhere)."""
    from launchpad.storage.upload import upload_tree

    store = open_store((tmp_path / "store").as_uri())
    src = tmp_path / "src"
    src.mkdir()
    (src / "ok.bin").write_bytes(b"1")
    (tmp_path / "etc").mkdir()
    (src / "etc").symlink_to(tmp_path / "etc")
    with pytest.raises(StorageError, match="symbolic link"):
        upload_tree(src, store, "x")


# -- item 13: manifest size cap -------------------------------------------------------------------------
def test_item13_manifests_over_the_cap_are_refused_on_every_store(any_store, tmp_path, monkeypatch):
    """Item 13: a manifest above MAX_MANIFEST_BYTES is never read whole: listing skips the checkpoint,
    download says which checkpoint and why. The cap is lowered to 4 KiB so each server gets a small object."""
    import launchpad.storage.checkpoints as ck

    store = any_store
    upload_checkpoint(store, make_local(tmp_path / "a", 1), JOB, 1)
    ref = upload_checkpoint(store, make_local(tmp_path / "b", 2), JOB, 2)
    key = f"{checkpoint_key(JOB, 2)}/{MANIFEST}"
    body = json.loads(store.get_bytes(key))
    body["padding"] = "x" * 8192  # still a valid manifest, only too big
    store.put_bytes(key, json.dumps(body).encode())
    monkeypatch.setattr(ck, "MAX_MANIFEST_BYTES", 4096)

    assert [r.step for r in list_checkpoints(store, JOB)] == [1]
    with pytest.raises(IncompleteCheckpoint, match=r"manifest of job-h/checkpoint-2 is \d+ bytes, over the"):
        download_checkpoint(store, ref, tmp_path / "dl")


def test_item13_a_huge_sparse_manifest_is_refused_without_reading_it(tmp_path):
    """Item 13, with the real 64 MiB cap: a 1 GiB manifest (sparse, so it costs no disk) is refused
    at once, naming the checkpoint; before the cap it was read whole (1.3 GB of memory)."""
    import resource

    store = open_store((tmp_path / "store").as_uri())
    ref = upload_checkpoint(store, make_local(tmp_path / "local", 3), JOB, 3)
    manifest = tmp_path / "store" / JOB / "checkpoint-3" / MANIFEST
    with open(manifest, "r+b") as f:
        f.truncate(1 << 30)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(IncompleteCheckpoint, match="checkpoint-3 is 1073741824 bytes, over the 64 MiB"):
        download_checkpoint(store, ref, tmp_path / "dl")
    assert latest_checkpoint(store, JOB) is None
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grew_kib < 256 * 1024, f"peak memory grew by {grew_kib} KiB"
