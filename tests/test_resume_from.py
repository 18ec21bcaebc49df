"""checkpoint.resume_from (Axolotl's resume_from_checkpoint): the first attempt starts from a Hugging Face
Trainer checkpoint folder, checked when the recipe loads.

The end-to-end test trains the smoke job with a hand-written TRL script (benchmarks/hand_trl.py: the same
TrainingArguments launchpad sets), takes its checkpoint-25, and lets `launchpad up` finish the job from
there: steps 26-30 must be the hand run's own, so the weights, optimizer, scheduler and data order all came
from the folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launchpad.recipe import RecipeError, load_recipe

REPO = Path(__file__).resolve().parents[1]


def smoke(tmp_path: Path, name: str = "from-folder", **changes) -> Path:
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    checkpoint = {**data["checkpoint"], **changes.pop("checkpoint", {})}
    data.update(name=name, checkpoint=checkpoint, **changes)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def fake_checkpoint(folder: Path, step: int = 25, *, adapter: dict | None = None, full: bool = False,
                    deepspeed: bool = False) -> Path:
    """The files a Trainer checkpoint is recognised by (the test of what the trainer makes of one is below)."""
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    if adapter is not None:
        (folder / "adapter_config.json").write_text(json.dumps(adapter))
    if full:
        (folder / "model.safetensors").write_bytes(b"")
    if deepspeed:
        (folder / f"global_step{step}").mkdir()
    return folder


def problems(path: Path) -> list[str]:
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert all(p.startswith(str(path)) for p in err.value.problems), err.value.problems
    return err.value.problems


def test_a_trainer_checkpoint_relative_to_the_recipe_is_resolved(tmp_path):
    fake_checkpoint(tmp_path / "out" / "checkpoint-25", adapter={"r": 8, "lora_alpha": 16})
    recipe = load_recipe(smoke(tmp_path, checkpoint={"resume_from": "out/checkpoint-25"}))
    assert recipe.checkpoint.resume_from == str(tmp_path / "out" / "checkpoint-25")


@pytest.mark.parametrize("make, resume_from, changes, says", [
    (None, "out/checkpoint-9", {}, "checkpoint.resume_from: checkpoint folder not found"),
    (None, "s3://bucket/job/checkpoint-9", {}, "use `launchpad resume JOB`"),
    ({}, "ck", {}, "no weights in"),
    ({"full": True}, "ck", {}, "holds a full model, not a LoRA adapter: set adapter: full"),
    ({"adapter": {"r": 8}}, "ck", {"adapter": "full"}, "holds a LoRA adapter (adapter_config.json): set adapter: lora"),
    ({"adapter": {"r": 16, "lora_alpha": 16}}, "ck", {}, "was trained with lora_r: 16, the recipe has lora_r: 8"),
    ({"adapter": {"r": 8}, "deepspeed": True}, "ck", {}, "was saved under DeepSpeed"),
    ({"adapter": {"r": 8}}, "ck", {"max_steps": 25}, "is at step 25 and max_steps is 25: nothing is left to train"),
])
def test_a_folder_that_cannot_be_continued_is_named_before_any_cloud_call(tmp_path, make, resume_from, changes,
                                                                           says):
    if make is not None:
        fake_checkpoint(tmp_path / resume_from, **make)
    lines = problems(smoke(tmp_path, checkpoint={"resume_from": resume_from}, **changes))
    assert any(says in line for line in lines), lines


def test_a_folder_without_trainer_state_is_not_a_checkpoint(tmp_path):
    (tmp_path / "weights").mkdir()
    lines = problems(smoke(tmp_path, checkpoint={"resume_from": "weights"}))
    assert any("not a Hugging Face Trainer checkpoint (no trainer_state.json" in line for line in lines), lines


def test_axolotl_s_resume_from_checkpoint_is_translated_with_one_line(tmp_path):
    fake_checkpoint(tmp_path / "outputs" / "out" / "checkpoint-9", step=9, adapter={"r": 8, "lora_alpha": 16})
    path = tmp_path / "axolotl.yml"
    path.write_text(yaml.safe_dump({
        "base_model": "builtin:tiny-llama", "adapter": "lora", "lora_r": 8, "lora_alpha": 16, "max_steps": 20,
        "datasets": [{"path": str(REPO / "recipes" / "data" / "smoke-chat.jsonl"), "type": "chat_template"}],
        "output_dir": "./outputs/out", "resume_from_checkpoint": "./outputs/out/checkpoint-9"}))
    recipe = load_recipe(path)
    assert recipe.checkpoint.resume_from == str(tmp_path / "outputs" / "out" / "checkpoint-9")
    lines = [n for n in recipe.notes if "resume_from_checkpoint" in n]
    assert len(lines) == 1 and "checkpoint.resume_from" in lines[0] and "later resumes use launchpad's own" in lines[0]


def test_convert_keeps_relative_paths_pointing_at_the_same_files_from_another_folder(run_cli, tmp_path):
    fake_checkpoint(tmp_path / "outputs" / "checkpoint-9", step=9, adapter={"r": 8, "lora_alpha": 16}, deepspeed=True)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "chat.jsonl").write_bytes((REPO / "recipes" / "data" / "smoke-chat.jsonl").read_bytes())
    config = tmp_path / "axolotl.yml"
    config.write_text(yaml.safe_dump({
        "base_model": "builtin:tiny-llama", "adapter": "lora", "max_steps": 20, "deepspeed": "zero2",
        "datasets": [{"path": "data/chat.jsonl", "type": "chat_template"}, {"path": "tatsu-lab/alpaca", "type": "alpaca"}],
        "resume_from_checkpoint": "./outputs/checkpoint-9"}))
    out = tmp_path / "converted" / "recipe.yaml"
    out.parent.mkdir()
    proc = run_cli("convert", str(config), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    data = yaml.safe_load(out.read_text())
    assert data["checkpoint"]["resume_from"] == "../outputs/checkpoint-9"
    assert [d["path"] for d in data["datasets"]] == ["../data/chat.jsonl", "tatsu-lab/alpaca"]  # a Hub id stays
    assert data["deepspeed"] == "zero2"  # a preset name stays
    assert load_recipe(out).checkpoint.resume_from == str(tmp_path / "outputs" / "checkpoint-9")


@pytest.mark.slow
def test_up_finishes_a_hand_written_trl_run_from_its_checkpoint(run_cli, tmp_path, launchpad_home):
    from launchpad.train.model import choose_optimizer
    from launchpad.train.tiny import ensure_tiny_llama

    recipe_path = smoke(tmp_path, max_steps=30)
    optim = choose_optimizer(load_recipe(recipe_path), log=lambda _m: None)
    hand = tmp_path / "hand"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "hand_trl.py"), "--model",
                    str(ensure_tiny_llama(tmp_path / "model")), "--data", str(REPO / "recipes" / "data" / "smoke-chat.jsonl"),
                    "--steps", "30", "--optim", optim, "--out", str(tmp_path / "hand.json"), "--workdir", str(hand)],
                   check=True, capture_output=True, timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    reference = json.loads((tmp_path / "hand.json").read_text())["losses"]
    assert len(reference) == 30 and (hand / "out" / "checkpoint-25" / "optimizer.pt").is_file()

    proc = run_cli("up", str(smoke(tmp_path, max_steps=30, checkpoint={"resume_from": str(hand / "out" / "checkpoint-25")})),
                   "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    job = json.loads(proc.stdout)
    assert job["state"] == "SUCCEEDED" and job["step"] == 30
    log = run_cli("logs", job["id"], check=True).stdout
    assert f"starting from {hand / 'out' / 'checkpoint-25'} (checkpoint.resume_from): step 25" in log
    assert "finished at step 30: 5 steps in" in log
    state = json.loads((launchpad_home / "checkpoints" / job["id"] / "checkpoint-30" / "trainer_state.json").read_text())
    losses = {h["step"]: h["loss"] for h in state["log_history"] if "loss" in h}
    assert sorted(losses) == list(range(1, 31))  # the folder's 25 steps and launchpad's 5
    for step in range(26, 31):  # launchpad's own steps: the hand run's, so everything came from the folder
        assert losses[step] == pytest.approx(reference[step - 1], rel=1e-4, abs=1e-5), (step, losses, reference)
    status = json.loads(run_cli("status", job["id"], "--json", check=True).stdout)[0]
    assert status["state"] == "SUCCEEDED"
