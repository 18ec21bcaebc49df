import os

import pytest

from launchpad.agent.prewarm import prewarm


def recipe(ds_path, base_model="builtin:tiny-llama"):
    return {"base_model": base_model, "datasets": [{"path": ds_path, "type": "chat"}]}


def test_dataset_and_model_uris_land_on_local_disk(tmp_path):
    src = tmp_path / "bucket"
    (src / "data").mkdir(parents=True)
    (src / "data" / "train.jsonl").write_bytes(b'{"text": "hi"}\n' * 1000)
    model = src / "models" / "m"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(os.urandom(300_000))
    r = recipe((src / "data" / "train.jsonl").as_uri(), base_model=model.as_uri())
    snaps = []
    out = prewarm(r, tmp_path / "nvme", tmp_path / "work", report=snaps.append, warm_env=False)
    local_ds = out.recipe["datasets"][0]["path"]
    assert local_ds.startswith(str(tmp_path / "nvme"))
    assert open(local_ds, "rb").read() == (src / "data" / "train.jsonl").read_bytes()
    assert (tmp_path / "nvme").as_posix() in out.recipe["base_model"]
    weights = os.path.join(out.recipe["base_model"], "model.safetensors")
    assert open(weights, "rb").read() == (model / "model.safetensors").read_bytes()
    assert snaps[-1]["done_bytes"] == snaps[-1]["total_bytes"] > 300_000
    assert set(out.parts) == {"dataset[0]", "model"}


def test_resumes_without_fetching_complete_files_again(tmp_path):
    src = tmp_path / "bucket"
    src.mkdir()
    (src / "train.jsonl").write_bytes(b"x" * 5000)
    r = recipe((src / "train.jsonl").as_uri())
    first = prewarm(r, tmp_path / "nvme", tmp_path / "work", warm_env=False)
    path = first.recipe["datasets"][0]["path"]
    before = os.stat(path).st_mtime_ns
    prewarm(r, tmp_path / "nvme", tmp_path / "work", warm_env=False)
    assert os.stat(path).st_mtime_ns == before


def test_local_paths_are_used_in_place(tmp_path):
    local = tmp_path / "train.jsonl"
    local.write_text("{}\n")
    out = prewarm(recipe(str(local)), tmp_path / "nvme", tmp_path / "work")
    assert out.recipe["datasets"][0]["path"] == str(local) and out.parts == {}


def test_a_missing_object_is_one_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match=r"pre-warm of dataset\[0\] failed: .*does not exist"):
        prewarm(recipe((tmp_path / "nope.jsonl").as_uri()), tmp_path / "nvme", tmp_path / "work", warm_env=False)
