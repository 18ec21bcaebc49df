import time

from launchpad.agent.uploader import AsyncUploader
from launchpad.storage import open_store
from launchpad.storage.checkpoints import latest_checkpoint, list_checkpoints
from launchpad.train.upload import hand_over


def make_checkpoint(root, step, size=1000):
    d = root / f"output/checkpoint-{step}"
    d.mkdir(parents=True)
    (d / "adapter_model.safetensors").write_bytes(bytes([step % 256]) * size)
    (d / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    return d


def test_hand_over_then_async_upload_keeps_the_newest(tmp_path):
    store = open_store((tmp_path / "store").as_uri())
    queue = tmp_path / "upload-queue"
    done = []
    up = AsyncUploader(store, "job-1", queue, keep=2, recipe_hash="h", on_uploaded=done.append,
                       log=lambda m: None, poll=0.01).start()
    for step in (10, 20, 30):
        src = make_checkpoint(tmp_path, step)
        t0 = time.monotonic()
        hand_over(src, queue, step)
        assert time.monotonic() - t0 < 0.5  # hard links: the trainer does not wait for the upload
    assert up.drain(timeout=30)
    assert [r.step for r in done] == [10, 20, 30]
    assert [r.step for r in list_checkpoints(store, "job-1")] == [20, 30]
    assert latest_checkpoint(store, "job-1").step == 30
    assert list(queue.iterdir()) == []  # local copies go once uploaded


def test_a_half_handed_over_folder_is_not_uploaded(tmp_path):
    store = open_store((tmp_path / "store").as_uri())
    queue = tmp_path / "upload-queue"
    (queue / "checkpoint-5.tmp").mkdir(parents=True)  # the trainer died mid hand-over
    up = AsyncUploader(store, "job-2", queue, keep=2, recipe_hash=None, on_uploaded=lambda r: None,
                       log=lambda m: None, poll=0.01).start()
    assert up.drain(timeout=5)
    assert latest_checkpoint(store, "job-2") is None


def test_an_unwritable_store_is_reported(tmp_path):
    target = tmp_path / "store"
    target.write_text("a file where the store's folder should be")
    store = open_store(target.as_uri())
    queue = tmp_path / "upload-queue"
    hand_over(make_checkpoint(tmp_path, 1), queue, 1)
    up = AsyncUploader(store, "job-3", queue, keep=2, recipe_hash=None, on_uploaded=lambda r: None,
                       log=lambda m: None, poll=0.01).start()
    assert not up.drain(timeout=10)
    assert up.error and "checkpoint-1" in up.error
