"""Issue 10, item 4: a corrupt newest checkpoint must not block resume for ever.

One flipped byte in the newest checkpoint used to make every resume fail "does not match its sha256"
while the older, intact checkpoint was never tried. Now resume takes the newest checkpoint that
verifies, warns naming the bad one, and moves the bad one's manifest aside so the step is uploaded
again. Runs on every store (file://, moto S3, gcp-storage-emulator, Azurite).
"""

from __future__ import annotations

from pathlib import Path

from launchpad.storage.checkpoints import (
    CORRUPT_MANIFEST,
    MANIFEST,
    download_for_resume,
    latest_checkpoint,
    list_checkpoints,
    upload_checkpoint,
)

JOB = "job-r"


def make_local(root: Path, step: int) -> Path:
    d = root / f"checkpoint-{step}"
    d.mkdir(parents=True)
    for i in range(3):
        (d / f"f{i}.bin").write_bytes(f"step {step} file {i} ".encode() * 200)
    return d


def flip_a_byte(store, step: int, name: str = "f1.bin") -> None:
    key = f"{JOB}/checkpoint-{step}/{name}"
    data = bytearray(store.get_bytes(key))
    data[5] ^= 0xFF  # same size: only the sha256 can tell
    store.put_bytes(key, bytes(data))


def test_item4_corrupt_newest_checkpoint_falls_back_to_the_newest_that_verifies(any_store, tmp_path):
    """Item 4: resume skips the corrupt checkpoint-20 (warning names it) and resumes from checkpoint-10."""
    store = any_store
    for step in (10, 20):
        upload_checkpoint(store, make_local(tmp_path / "local", step), JOB, step)
    flip_a_byte(store, 20)
    assert latest_checkpoint(store, JOB).step == 20  # sizes match: only the download can tell

    lines: list[str] = []
    ref, dest = download_for_resume(store, JOB, tmp_path / "resume", log=lines.append)
    assert ref.step == 10 and dest == tmp_path / "resume" / "checkpoint-10"
    assert (dest / "f0.bin").is_file() and (dest / MANIFEST).is_file()
    assert len(lines) == 1 and "checkpoint-20" in lines[0] and "sha256" in lines[0] and lines[0].startswith("warning")
    assert not (tmp_path / "resume" / "checkpoint-20").exists()

    # The bad one no longer counts as complete, so the next resume goes straight to checkpoint-10 ...
    assert [r.step for r in list_checkpoints(store, JOB)] == [10]
    assert store.exists(f"{JOB}/checkpoint-20/{CORRUPT_MANIFEST}")
    lines.clear()
    assert download_for_resume(store, JOB, tmp_path / "resume2", log=lines.append)[0].step == 10
    assert lines == []
    # ... and the trainer's re-save of step 20 is uploaded again instead of being skipped as done.
    upload_checkpoint(store, make_local(tmp_path / "again", 20), JOB, 20)
    ref, dest = download_for_resume(store, JOB, tmp_path / "resume3", log=lines.append)
    assert ref.step == 20 and lines == []


def test_item4_when_no_checkpoint_verifies_resume_starts_over_with_a_warning(tmp_path):
    """Item 4: every checkpoint corrupt -> (None, None) and one warning naming them, never a loop of failures."""
    from launchpad.storage import open_store

    store = open_store((tmp_path / "store").as_uri())
    upload_checkpoint(store, make_local(tmp_path / "local", 5), JOB, 5)
    flip_a_byte(store, 5)
    lines: list[str] = []
    assert download_for_resume(store, JOB, tmp_path / "resume", log=lines.append) == (None, None)
    assert "checkpoint-5" in lines[-1] and "step 0" in lines[-1]
