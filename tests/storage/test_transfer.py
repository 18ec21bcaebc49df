"""The transfer engine's rules (parts, resume, retries, checksums, safety) against stores built on the
public Store ABC: an in-memory store as a third-party plugin would write one, and the real FileStore."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from launchpad.errors import StorageError, StorageUnavailable
from launchpad.storage import ObjectInfo, Store
from launchpad.storage.file import FileStore
from launchpad.storage.transfer import PARTIAL_DIR, download_file, download_tree, upload_tree

MiB = 1 << 20


class MemoryStore(Store):
    """Objects in a dict. Records every ranged read; `fail` decides whether a read breaks off midway."""

    scheme = "mem"

    def __init__(self, objects: dict[str, bytes] | None = None):
        super().__init__("mem://test")
        self.objects = dict(objects or {})
        self.etags = {k: "v1" for k in self.objects}
        self.ranges: list[tuple[str, int, int]] = []
        self.fail = lambda key, start, end, attempt: False
        self._attempts: dict[tuple[str, int, int], int] = {}
        self._lock = threading.Lock()

    def replace(self, key: str, data: bytes, etag: str) -> None:
        self.objects[key], self.etags[key] = data, etag

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        return [ObjectInfo(k, len(v), self.etags.get(k)) for k, v in self.objects.items() if k.startswith(prefix)]

    def get_range_to(self, key: str, start: int, end: int, out) -> None:
        if key not in self.objects:
            raise StorageError(f"no such object: {self.uri(key)}")
        with self._lock:
            attempt = self._attempts.get((key, start, end), 0)
            self._attempts[(key, start, end)] = attempt + 1
            self.ranges.append((key, start, end))
        data = self.objects[key][start:end]
        half = len(data) // 2
        if self.fail(key, start, end, attempt):
            out.write(data[:half])
            raise StorageUnavailable(f"connection reset reading {self.uri(key)}")
        for i in range(0, len(data), 256 * 1024):
            out.write(data[i : i + 256 * 1024])

    def get_file(self, key: str, dest: Path) -> None:
        if key not in self.objects:
            raise StorageError(f"no such object: {self.uri(key)}")
        Path(dest).write_bytes(self.objects[key])

    def put_file(self, src: Path, key: str) -> None:
        self.objects[key] = Path(src).read_bytes()

    def get_bytes(self, key: str) -> bytes:
        return self.objects[key]

    def put_bytes(self, key: str, data: bytes) -> None:
        self.objects[key] = data

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)


class WholeObjectStore(MemoryStore):
    """A store with no ranged reads at all (the ABC's defaults)."""

    get_range_to = Store.get_range_to


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def blobs() -> dict[str, bytes]:
    return {"data/big.bin": os.urandom(10 * MiB + 123), "data/a/small.txt": b"hello", "data/a/empty": b""}


@pytest.fixture
def out(tmp_path) -> Path:
    """The download destination (tmp_path itself also holds the test's LAUNCHPAD_HOME)."""
    return tmp_path / "out"


class _Stop(Exception):
    pass


def test_every_part_fetched_once_in_parallel(blobs, out):
    store = MemoryStore(blobs)
    seen: list[int] = []
    stats = download_tree(store, "data", out, workers=4, part_size=MiB, progress=lambda d, t: seen.append(d))
    for key, data in blobs.items():
        assert (out / key.removeprefix("data/")).read_bytes() == data
    big = sorted((s, e) for k, s, e in store.ranges if k == "data/big.bin")
    assert big == [(s, min(s + MiB, 10 * MiB + 123)) for s in range(0, 10 * MiB + 123, MiB)]
    assert stats.files == 3 and stats.bytes == sum(map(len, blobs.values()))
    assert seen == sorted(seen) and seen[-1] == stats.bytes
    assert not (out / PARTIAL_DIR).exists()


def test_resume_fetches_only_the_missing_parts(blobs, out):
    store = MemoryStore(blobs)

    def stop(done: int, total: int) -> None:
        if done >= 4 * MiB:
            raise _Stop()

    with pytest.raises(_Stop):
        download_tree(store, "data", out, workers=1, part_size=MiB, progress=stop)
    first = set(store.ranges)
    assert not (out / "big.bin").exists()
    store.ranges.clear()
    stats = download_tree(store, "data", out, workers=2, part_size=MiB)
    second = {r for r in store.ranges if r[0] == "data/big.bin"}
    assert (out / "big.bin").read_bytes() == blobs["data/big.bin"]
    # The parts finished before the interruption were not fetched again...
    finished_before = {r for r in first if r[0] == "data/big.bin"} - second
    assert len(finished_before) >= 3
    # ... and this call counted only what it fetched.
    assert stats.bytes == sum(e - s for _, s, e in store.ranges)


def test_a_changed_object_starts_over(blobs, out):
    store = MemoryStore(blobs)

    def stop(done: int, total: int) -> None:
        if done >= 4 * MiB:
            raise _Stop()

    with pytest.raises(_Stop):
        download_tree(store, "data", out, workers=1, part_size=MiB, progress=stop)
    new = os.urandom(len(blobs["data/big.bin"]))
    store.replace("data/big.bin", new, etag="v2")  # same size, new version
    download_tree(store, "data", out, workers=2, part_size=MiB)
    assert (out / "big.bin").read_bytes() == new


def test_transient_errors_are_retried_per_part(blobs, out):
    store = MemoryStore(blobs)
    store.fail = lambda key, start, end, attempt: attempt == 0  # every range breaks off once, halfway
    seen: list[tuple[int, int]] = []
    download_tree(store, "data", out, workers=3, part_size=MiB, progress=lambda d, t: seen.append((d, t)))
    assert (out / "big.bin").read_bytes() == blobs["data/big.bin"]
    assert seen[-1][0] == seen[-1][1] == sum(map(len, blobs.values()))


def test_persistent_errors_give_up_after_bounded_retries(blobs, out, monkeypatch):
    monkeypatch.setenv("LAUNCHPAD_STORAGE_RETRIES", "3")
    store = MemoryStore({"data/big.bin": blobs["data/big.bin"]})
    store.fail = lambda key, start, end, attempt: True
    with pytest.raises(StorageUnavailable, match="connection reset"):
        download_tree(store, "data", out, workers=1, part_size=4 * MiB)
    assert len(store.ranges) == 3  # the first part, tried three times; nothing after it
    assert not (out / "big.bin").exists()


def test_checksums(blobs, tmp_path):
    store = MemoryStore(blobs)
    good = {"big.bin": _sha(blobs["data/big.bin"]), "data/a/small.txt": _sha(b"hello")}  # relative or full keys
    download_tree(store, "data", tmp_path / "ok", part_size=MiB, verify=good)

    with pytest.raises(StorageError, match="does not match its expected sha256"):
        download_tree(store, "data", tmp_path / "bad", part_size=MiB, verify={"big.bin": "0" * 64})
    assert not (tmp_path / "bad" / "big.bin").exists()
    with pytest.raises(StorageError, match="missing under"):
        download_tree(store, "data", tmp_path / "bad", verify={"not/there.bin": "0" * 64})


def test_complete_files_are_skipped_and_wrong_ones_fetched_again(blobs, out):
    store = MemoryStore(blobs)
    (out / "a").mkdir(parents=True)
    (out / "big.bin").write_bytes(blobs["data/big.bin"])  # already complete
    (out / "a" / "small.txt").write_bytes(b"stale!")  # wrong size
    stats = download_tree(store, "data", out, part_size=MiB)
    assert not any(k == "data/big.bin" for k, _, _ in store.ranges)
    assert (out / "a" / "small.txt").read_bytes() == b"hello"
    assert stats.skipped_files == 1 and stats.skipped_bytes == len(blobs["data/big.bin"])
    # With a checksum, "complete" means the right bytes too, not just the right size.
    (out / "a" / "small.txt").write_bytes(b"HELLO")
    download_tree(store, "data", out, verify={"a/small.txt": _sha(b"hello")})
    assert (out / "a" / "small.txt").read_bytes() == b"hello"


@pytest.mark.parametrize("key", ["data/../../evil", "data/a/../../evil", "data//abs", f"data/{PARTIAL_DIR}/x"])
def test_keys_that_would_escape_dest_are_refused(key, tmp_path):
    store = MemoryStore({key: b"pwned"})
    dest = tmp_path / "deep" / "dest"
    with pytest.raises(StorageError, match="refusing"):
        download_tree(store, "data", dest)
    assert not (tmp_path / "evil").exists() and not (tmp_path / "deep" / "evil").exists()


def test_folder_markers_are_not_files(out):
    store = MemoryStore({"data/dir/": b"", "data/dir/x": b"1"})
    download_tree(store, "data/", out)
    assert (out / "dir" / "x").read_bytes() == b"1"


def test_a_store_without_ranged_reads_still_works(blobs, out):
    store = WholeObjectStore(blobs)
    stats = download_tree(store, "data", out, part_size=MiB)
    assert (out / "big.bin").read_bytes() == blobs["data/big.bin"] and stats.files == 3


def test_download_file_leaves_nothing_behind_on_failure(blobs, out, monkeypatch):
    monkeypatch.setenv("LAUNCHPAD_STORAGE_RETRIES", "1")
    store = MemoryStore(blobs)
    store.fail = lambda key, start, end, attempt: start >= 5 * MiB
    with pytest.raises(StorageUnavailable):
        download_file(store, "data/big.bin", out / "big.bin", part_size=MiB, workers=4)
    assert not out.exists() or list(out.iterdir()) == []
    store.fail = lambda *a: False
    out.mkdir(exist_ok=True)
    (out / "big.bin").write_bytes(b"old")  # get_file semantics: always replaced
    download_file(store, "data/big.bin", out / "big.bin", part_size=MiB)
    assert (out / "big.bin").read_bytes() == blobs["data/big.bin"]


def test_resume_after_kill_9(tmp_path):
    """A real SIGKILL in the middle of a download (torn journal lines and all), then a resume."""
    src = FileStore((tmp_path / "store").as_uri())
    data = os.urandom(12 * MiB)
    src.put_bytes("w/model.bin", data)
    dest = tmp_path / "dest"
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from launchpad.storage.file import FileStore
        from launchpad.storage.transfer import download_tree
        def die(done, total):
            if done >= 5 * (1 << 20):
                os.kill(os.getpid(), signal.SIGKILL)
        download_tree(FileStore({src.root_uri!r}), "w", Path({str(dest)!r}), workers=2, part_size=1 << 20, progress=die)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()
    assert not (dest / "model.bin").exists() and (dest / PARTIAL_DIR).is_dir()
    stats = download_tree(src, "w", dest, workers=2, part_size=MiB, verify={"model.bin": _sha(data)})
    assert 0 < stats.bytes < len(data)
    assert (dest / "model.bin").read_bytes() == data


def test_upload_tree_stops_at_the_first_error(tmp_path):
    class Full(MemoryStore):
        def put_file(self, src, key):
            if key.endswith("3"):
                raise StorageError(f"cannot write {self.uri(key)}: No space left on device")
            super().put_file(src, key)

    src = tmp_path / "src"
    src.mkdir()
    for i in range(6):
        (src / f"f{i}").write_bytes(b"x")
    store = Full()
    with pytest.raises(StorageError, match="No space left"):
        upload_tree(src, store, "p", workers=1)
    assert "p/f3" not in store.objects and "p/f5" not in store.objects
