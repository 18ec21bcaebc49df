"""The file:// store against a real folder."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from launchpad.errors import StorageError
from launchpad.storage import open_store
from launchpad.storage.file import TMP_PREFIX, FileStore, path_of_file_uri


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore((tmp_path / "root").as_uri())


def test_open_store_finds_the_builtin_plugin(tmp_path: Path):
    by_uri = open_store(tmp_path.as_uri())
    by_path = open_store(str(tmp_path))
    assert isinstance(by_uri, FileStore) and isinstance(by_path, FileStore)
    assert by_uri.root == by_path.root == tmp_path


def test_uri_round_trip_with_odd_characters(tmp_path: Path):
    odd = tmp_path / "a dir with spaces%20"
    assert path_of_file_uri(odd.as_uri()) == odd
    assert FileStore(odd.as_uri()).root == odd


def test_bytes_round_trip_nested_keys(store: FileStore):
    store.put_bytes("job/checkpoint-1/sub/x.bin", b"hello")
    assert store.get_bytes("job/checkpoint-1/sub/x.bin") == b"hello"
    assert store.exists("job/checkpoint-1/sub/x.bin")
    assert not store.exists("job/checkpoint-1/sub")  # a folder is not an object
    store.put_bytes("job/checkpoint-1/sub/x.bin", b"bye")  # overwrite
    assert store.get_bytes("job/checkpoint-1/sub/x.bin") == b"bye"


def test_list_is_recursive_with_sizes_and_raw_prefixes(store: FileStore):
    store.put_bytes("j/checkpoint-1/a", b"1")
    store.put_bytes("j/checkpoint-10/b/c", b"22")
    store.put_bytes("j2/x", b"333")
    assert {(o.key, o.size) for o in store.list()} == {("j/checkpoint-1/a", 1), ("j/checkpoint-10/b/c", 2), ("j2/x", 3)}
    assert {o.key for o in store.list("j/")} == {"j/checkpoint-1/a", "j/checkpoint-10/b/c"}
    # Object-store semantics: a prefix is a string prefix, not a folder.
    assert {o.key for o in store.list("j/checkpoint-1")} == {"j/checkpoint-1/a", "j/checkpoint-10/b/c"}
    assert [o.key for o in store.list("j/checkpoint-1/")] == ["j/checkpoint-1/a"]
    assert store.list("nope/") == []


def test_list_of_a_missing_root_is_empty(tmp_path: Path):
    assert FileStore((tmp_path / "never-made").as_uri()).list() == []


def test_temporary_files_are_never_listed(store: FileStore):
    store.put_bytes("k/real", b"x")
    (store.root / "k" / f"{TMP_PREFIX}half").write_bytes(b"partial")
    (store.root / f"{TMP_PREFIX}dir").mkdir()
    (store.root / f"{TMP_PREFIX}dir" / "f").write_bytes(b"partial")
    assert [o.key for o in store.list()] == ["k/real"]


def test_put_and_get_file(store: FileStore, tmp_path: Path):
    src = tmp_path / "src.bin"
    src.write_bytes(b"\0" * 100_000)
    store.put_file(src, "a/b.bin")
    dest = tmp_path / "out" / "deep" / "b.bin"
    store.get_file("a/b.bin", dest)
    assert dest.read_bytes() == src.read_bytes()
    leftovers = [p for p in tmp_path.rglob(f"{TMP_PREFIX}*")]
    assert leftovers == []


def test_missing_objects_raise_and_leave_nothing(store: FileStore, tmp_path: Path):
    dest = tmp_path / "out" / "x"
    with pytest.raises(StorageError, match="no such object"):
        store.get_file("missing", dest)
    assert not dest.exists()
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    with pytest.raises(StorageError, match="no such object"):
        store.get_bytes("missing")


def test_delete_is_silent_when_missing_and_prunes_empty_folders(store: FileStore):
    store.delete("never/was")
    store.put_bytes("j/checkpoint-5/a/b", b"x")
    store.put_bytes("j/keep", b"y")
    store.delete("j/checkpoint-5/a/b")
    store.delete("j/checkpoint-5/a/b")
    assert not (store.root / "j" / "checkpoint-5").exists()
    assert (store.root / "j" / "keep").exists()
    store.delete_prefix("j/")
    assert store.list() == []
    assert store.root.is_dir()  # the root itself stays


@pytest.mark.parametrize("key", ["", "../escape", "a/../../b", "/", "a/./.."])
def test_keys_cannot_escape_the_root(store: FileStore, key: str):
    with pytest.raises(StorageError, match="invalid object key"):
        store.put_bytes(key, b"x")


def test_unwritable_root_is_a_clear_storage_error(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    store = FileStore((blocker / "store").as_uri())
    with pytest.raises(StorageError, match="cannot write to"):
        store.put_bytes("k", b"x")


def test_other_host_in_file_uri_is_refused():
    from launchpad.errors import BadInput

    with pytest.raises(BadInput):
        FileStore("file://otherhost/share")


def test_concurrent_writers_never_expose_partial_objects(store: FileStore):
    payloads = {i: bytes([i]) * 200_000 for i in range(8)}
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for _ in range(5):
                store.put_bytes("same/key", payloads[i])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in payloads]
    for t in threads:
        t.start()
    seen = set()
    while any(t.is_alive() for t in threads):
        try:
            data = store.get_bytes("same/key")
        except StorageError:
            continue
        assert len(data) == 200_000 and len(set(data)) == 1
        seen.add(data[0])
    for t in threads:
        t.join()
    assert not errors
    assert [o.key for o in store.list()] == ["same/key"]
