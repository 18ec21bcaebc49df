"""Issue 10, item 4, in the trainer: `_resume_checkpoint` (what `launchpad resume` runs on the
instance) must fall back to an older checkpoint when the newest fails its sha256, not fail for ever."""

from __future__ import annotations

import json
from pathlib import Path

from launchpad.recipe import load_recipe
from launchpad.storage import open_store
from launchpad.storage.checkpoints import upload_checkpoint
from launchpad.train.distributed import Ranks
from launchpad.train.spec import TrainJob
from launchpad.train.status import StatusWriter
from launchpad.train.trainer import _resume_checkpoint

REPO = Path(__file__).resolve().parents[2]


def test_item4_trainer_resumes_from_the_newest_checkpoint_that_verifies(tmp_path, capsys):
    """Item 4: one flipped byte in checkpoint-20 -> resume from checkpoint-10 with a warning naming checkpoint-20."""
    recipe = load_recipe(REPO / "recipes" / "smoke-lora.yaml")
    (tmp_path / "job.json").write_text(json.dumps({
        "job_id": "job-t", "recipe": recipe.model_dump(mode="json"), "checkpoint_uri": (tmp_path / "store").as_uri(),
        "workdir": str(tmp_path / "work"), "status_path": str(tmp_path / "work" / "status.json"),
    }))
    spec = TrainJob.load(tmp_path / "job.json")
    store = open_store(spec.checkpoint_uri)
    for step in (10, 20):
        local = tmp_path / "local" / f"checkpoint-{step}"
        local.mkdir(parents=True)
        (local / "adapter.bin").write_bytes(f"weights at {step} ".encode() * 100)
        (local / "trainer_state.json").write_text(json.dumps({"log_history": [{"step": step, "loss": 1.0 / step}]}))
        upload_checkpoint(store, local, spec.job_id, step)
    key = f"{spec.job_id}/checkpoint-20/adapter.bin"
    data = bytearray(store.get_bytes(key))
    data[0] ^= 1
    store.put_bytes(key, bytes(data))

    status = StatusWriter(spec.status_path, spec.job_id)
    ref, dest = _resume_checkpoint(spec, store, Ranks.from_env(), status)
    assert ref.step == 10 and (dest / "adapter.bin").read_bytes().startswith(b"weights at 10")
    out = capsys.readouterr().out
    assert "warning: not resuming from checkpoint-20" in out and "resuming job-t from checkpoint-10" in out
