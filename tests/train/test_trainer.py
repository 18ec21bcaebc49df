"""The real trainer entrypoint, `python -m launchpad.train --spec`, in a subprocess: falling loss,
verified checkpoints, status.json, kill -9 and resume from the latest complete checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launchpad.models import JobProgress
from launchpad.recipe import load_recipe
from launchpad.storage import open_store
from launchpad.storage.checkpoints import MANIFEST, download_checkpoint, latest_checkpoint, list_checkpoints

pytest.importorskip("trl")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "recipes" / "smoke-lora.yaml"
MAX_STEPS = 30
EVERY = 10


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory) -> Path:
    """One LAUNCHPAD_HOME for the module, so the builtin tiny model is built once and reused."""
    return tmp_path_factory.mktemp("lp-home")


def write_spec(root: Path, job_id: str, *, max_steps: int | None = MAX_STEPS, **overrides) -> dict:
    recipe = load_recipe(SMOKE, overrides={"checkpoint.every_steps": EVERY, "checkpoint.keep": 2, **overrides})
    spec = {
        "job_id": job_id,
        "recipe": recipe.model_dump(mode="json"),
        "checkpoint_uri": (root / "store").as_uri(),
        "workdir": str(root / "work"),
        "status_path": str(root / "work" / "status.json"),
        "max_steps": max_steps,
    }
    (root / "job.json").write_text(json.dumps(spec))
    return spec


def _log_of(proc: subprocess.Popen) -> str:
    return Path(proc._lp_log).read_text()  # type: ignore[attr-defined]


def run_trainer(root: Path, home: Path, timeout: float = 120) -> tuple[int, str]:
    proc = launch(root, home)
    proc.wait(timeout=timeout)
    return proc.returncode, _log_of(proc)


def launch(root: Path, home: Path) -> subprocess.Popen:
    env = {**os.environ, "LAUNCHPAD_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    log_path = root / f"train-{time.monotonic_ns()}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "launchpad.train", "--spec", str(root / "job.json")],
            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root,
        )
    proc._lp_log = str(log_path)  # type: ignore[attr-defined]
    return proc


def status_of(spec: dict) -> dict:
    return json.loads(Path(spec["status_path"]).read_text())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, model_cache) -> tuple[dict, dict, str]:
    """(spec, final status, log) of one uninterrupted run: the reference the resume test compares to."""
    root = tmp_path_factory.mktemp("straight")
    spec = write_spec(root, "straight-1")
    rc, log = run_trainer(root, model_cache)
    assert rc == 0, log
    return spec, status_of(spec), log


def test_training_run_falls_in_loss_and_leaves_a_verified_final_checkpoint(uninterrupted, tmp_path):
    spec, status, log = uninterrupted
    assert status["phase"] == "done" and status["finished"] is True and status["error"] is None
    assert status["job_id"] == "straight-1"
    assert status["step"] == MAX_STEPS and status["total_steps"] == MAX_STEPS
    losses = [loss for _, loss in status["losses"]]
    assert [s for s, _ in status["losses"]] == list(range(1, MAX_STEPS + 1))  # logging_steps: 1
    assert losses[0] > 6.0  # ln(1024) = 6.93: a random model
    assert losses[-1] < 2.0 and losses[-1] < losses[0] / 3
    assert status["tokens_per_s"] and status["tokens_per_s"] > 0
    assert status["resumed_from"] is None
    assert status["heartbeat"] >= status["started_at"]

    store = open_store(spec["checkpoint_uri"])
    refs = list_checkpoints(store, "straight-1")
    assert [r.step for r in refs] == [MAX_STEPS - EVERY, MAX_STEPS]  # keep: 2, older ones pruned
    assert status["last_checkpoint"] == {"step": MAX_STEPS, "uri": refs[-1].uri}
    dest = download_checkpoint(store, refs[-1], tmp_path / "final")
    names = {p.name for p in dest.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "trainer_state.json", "tokenizer.json"} <= names
    assert json.loads((dest / "trainer_state.json").read_text())["global_step"] == MAX_STEPS
    manifest = json.loads((dest / MANIFEST).read_text())
    assert manifest["recipe_hash"] and manifest["job_id"] == "straight-1"

    progress = JobProgress.from_status(status, running=False, exit_code=0)
    assert progress.phase == "done" and progress.step == MAX_STEPS and progress.last_checkpoint_step == MAX_STEPS
    assert f"uploaded checkpoint-{MAX_STEPS}" in log


def test_kill_9_then_resume_from_the_latest_complete_checkpoint(uninterrupted, tmp_path, model_cache):
    ref_spec, ref_status, _ = uninterrupted
    spec = write_spec(tmp_path, "killed-1")
    store = open_store(spec["checkpoint_uri"])
    # A checkpoint folder without a manifest, far ahead: it must never be resumed from.
    store.put_bytes("killed-1/checkpoint-999/trainer_state.json", b'{"global_step": 999}')

    proc = launch(tmp_path, model_cache)
    first = store.root / "killed-1" / f"checkpoint-{EVERY}" / MANIFEST
    deadline = time.monotonic() + 90
    while not first.exists():
        assert proc.poll() is None, _log_of(proc)
        assert time.monotonic() < deadline, "no checkpoint manifest appeared"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    killed_at = status_of(spec)["step"]
    assert killed_at < MAX_STEPS

    latest = latest_checkpoint(store, "killed-1")
    assert latest is not None and EVERY <= latest.step < MAX_STEPS  # 10, or 20 if it raced ahead
    Path(spec["workdir"], "SAVE_NOW").touch()  # also: a save request is honoured at the next step end
    rc, log = run_trainer(tmp_path, model_cache)
    assert rc == 0, log
    assert f"resuming killed-1 from checkpoint-{latest.step}" in log
    assert "checkpoint-999" not in log.replace("checkpoint-999/", "")
    assert f"uploaded checkpoint-{latest.step + 1} " in log  # the SAVE_NOW checkpoint
    assert not Path(spec["workdir"], "SAVE_NOW").exists()

    status = status_of(spec)
    assert status["phase"] == "done" and status["step"] == MAX_STEPS
    assert status["resumed_from"] == {"step": latest.step, "uri": latest.uri}
    new_steps = [line for line in log.splitlines() if line.startswith("step ")]
    assert new_steps and int(new_steps[0].split()[1].split("/")[0]) == latest.step + 1
    # The curve in status.json is whole again (the pre-kill part comes from the checkpoint), and after
    # the resume it is the uninterrupted run's curve, step for step.
    assert [s for s, _ in status["losses"]] == list(range(1, MAX_STEPS + 1))
    reference = dict(map(tuple, ref_status["losses"]))
    for step, loss in status["losses"]:
        assert loss == pytest.approx(reference[step], rel=1e-4, abs=1e-4), step
    assert latest_checkpoint(store, "killed-1").step == MAX_STEPS
    assert store.exists("killed-1/checkpoint-999/trainer_state.json")  # newer incomplete: left alone


def test_unwritable_checkpoint_store_fails_with_one_clear_line(tmp_path, model_cache):
    spec = write_spec(tmp_path, "nowrite-1")
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the store should be")
    spec["checkpoint_uri"] = (blocker / "store").as_uri()
    (tmp_path / "job.json").write_text(json.dumps(spec))
    rc, log = run_trainer(tmp_path, model_cache)
    assert rc == 1, log
    status = status_of(spec)
    assert status["phase"] == "failed" and status["finished"] is False
    assert "not writable" in status["error"] and "\n" not in status["error"]
    assert "Traceback" not in log


def test_bad_spec_exits_2_before_loading_anything(tmp_path, model_cache):
    (tmp_path / "job.json").write_text(json.dumps({"job_id": "../evil", "recipe": {}, "workdir": "rel"}))
    rc, log = run_trainer(tmp_path, model_cache, timeout=30)
    assert rc == 2
    assert "job_id" in log and "workdir" in log and "Traceback" not in log


def test_full_fine_tune_on_alpaca_and_completion_data(tmp_path, model_cache):
    alpaca = tmp_path / "alpaca.jsonl"
    alpaca.write_text("".join(
        json.dumps({"instruction": f"What is {a} plus {a}?", "input": "", "output": f"{a} plus {a} is {2 * a}."}) + "\n"
        for a in range(10)
    ))
    text = tmp_path / "text.jsonl"
    text.write_text("".join(json.dumps({"text": f"The day after Monday is Tuesday. {i}"}) + "\n" for i in range(10)))
    spec = write_spec(
        tmp_path, "full-1", max_steps=6,
        **{"adapter": "full", "lora_modules_to_save": None, "learning_rate": 0.001, "checkpoint.every_steps": 4,
           "datasets": [{"path": str(alpaca), "type": "alpaca"}, {"path": str(text), "type": "completion"}]},
    )
    rc, log = run_trainer(tmp_path, model_cache)
    assert rc == 0, log
    status = status_of(spec)
    assert status["phase"] == "done" and status["step"] == 6
    assert status["losses"][-1][1] < status["losses"][0][1]
    store = open_store(spec["checkpoint_uri"])
    assert [r.step for r in list_checkpoints(store, "full-1")] == [4, 6]  # every 4, and always the last
    final = download_checkpoint(store, list_checkpoints(store, "full-1")[-1], tmp_path / "final")
    assert (final / "model.safetensors").exists() and (final / "tokenizer.json").exists()
    assert "dataset: 20 rows" in log
