"""launchpad.train.reporting: which `report_to` integrations a run gets, the TensorBoard mirror into the
store (what it sends, and that a store which refuses never ends the run), W&B (offline) and MLflow (a file
store) receiving every logged step of a real run, and an integration that raises turned off, not fatal.
The TensorBoard end-to-end half -- the scalars of a real run read back from the store -- is in
tests/test_lifecycle.py."""

from __future__ import annotations

import importlib.util
import json
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from launchpad.recipe import load_recipe
from launchpad.storage import open_store
from launchpad.train.reporting import RunsMirror, _guarded, integration_env, report_to

REPO = Path(__file__).resolve().parents[2]


def test_integrations_follow_the_recipe_and_the_environment(monkeypatch):
    said: list[str] = []
    plain = load_recipe(REPO / "recipes" / "smoke-lora.yaml")
    assert report_to(plain, env={}, log=said.append) == ["tensorboard"] and said == []
    wandb = load_recipe(REPO / "recipes" / "smoke-lora.yaml", {"wandb_project": "ft", "wandb_name": "run-1"})
    mlflow_env = {"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"}
    assert report_to(wandb, env=mlflow_env, log=said.append) == ["tensorboard", "wandb", "mlflow"] and said == []
    env = integration_env(wandb, Path("/w"))
    assert env == {"TENSORBOARD_LOGGING_DIR": "/w/runs", "WANDB_PROJECT": "ft", "WANDB_NAME": "run-1"}

    real_find_spec = importlib.util.find_spec

    def find_spec_simulating_an_image_without_them(name, *args):  # both are installed here (dev extra)
        return None if name in ("wandb", "mlflow") else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec_simulating_an_image_without_them)
    assert report_to(wandb, env=mlflow_env, log=said.append) == ["tensorboard"]  # said, not fatal
    assert any("wandb is not installed" in s for s in said) and any("mlflow is not installed" in s for s in said)


def test_an_integration_that_raises_is_said_once_and_turned_off(tmp_path, monkeypatch):
    """MLflow 3 refuses a plain file store (a real MlflowException, raised where transformers' own callback
    starts): the guarded callback says it once and stays quiet; without the guard it would end the run."""
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from transformers.integrations import MLflowCallback

    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    said: list[str] = []
    guarded = _guarded(TrainerCallback, MLflowCallback(), said.append)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=["mlflow"])
    state, control = TrainerState(), TrainerControl()
    guarded.on_train_begin(args, state, control, model=None)
    guarded.on_log(args, state, control, logs={"loss": 1.0}, model=None)
    guarded.on_train_end(args, state, control, model=None)
    assert len(said) == 1 and "MLflow reporting failed (MlflowException" in said[0] and "training goes on" in said[0]


def wandb_records(path: Path) -> Iterator:
    """The records of a W&B run file (``run-ID.wandb``: LevelDB's log format after a 7-byte header, each
    record a wandb_internal_pb2.Record), read with W&B's own protobuf classes."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or (length == 0 and kind == 0):  # the block's zero padding
            pos += left
            continue
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
            record.ParseFromString(pending)
            pending = b""
            yield record


@pytest.mark.slow
def test_wandb_and_mlflow_receive_every_logged_step(run_cli, tmp_path, monkeypatch):
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data.update(name="tracked", max_steps=10, wandb_project="lp-test", wandb_name="run-1",
                checkpoint={"every_steps": 10, "keep": 1})
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    mlruns = tmp_path / "mlruns"
    data["env"] = {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "MLFLOW_TRACKING_URI": mlruns.as_uri(),
                   "MLFLOW_EXPERIMENT_NAME": "lp-test", "MLFLOW_ALLOW_FILE_STORE": "true"}
    recipe = tmp_path / "tracked.yaml"
    recipe.write_text(yaml.safe_dump(data))
    run_cli("up", str(recipe), check=True, timeout=240)

    (run_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    losses, project = [], None
    for record in wandb_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            project = (record.run.project, record.run.display_name)
        elif kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            if "train/loss" in items:
                losses.append(items["train/global_step"])
    assert project == ("lp-test", "run-1") and losses == list(range(1, 11))

    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # for this reader too
    client = MlflowClient(tracking_uri=mlruns.as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("lp-test").experiment_id])
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == list(range(1, 11))


def test_the_mirror_sends_new_and_grown_files_only(tmp_path):
    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    event = runs / "a" / "events.out.tfevents.1"
    event.write_bytes(b"x" * 10)
    store = open_store((tmp_path / "store").as_uri())
    mirror = RunsMirror(store, "job-1", runs)
    assert mirror.sync() == 1 and mirror.sync() == 0
    event.write_bytes(b"x" * 20)
    assert mirror.sync() == 1
    assert store.get_bytes("job-1/runs/a/events.out.tfevents.1") == b"x" * 20


def test_a_store_that_refuses_is_said_once_and_the_run_goes_on(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "events.out.tfevents.1").write_bytes(b"x")
    (runs / "events.out.tfevents.2").write_bytes(b"y")
    (tmp_path / "store" / "job-1").mkdir(parents=True)
    (tmp_path / "store" / "job-1" / "runs").write_text("a file where the folder must go")  # a real refusal
    said: list[str] = []
    mirror = RunsMirror(open_store((tmp_path / "store").as_uri()), "job-1", runs, log=said.append)
    assert mirror.sync() == 0 and mirror.sync() == 0
    assert len(said) == 1 and "cannot copy the TensorBoard logs" in said[0] and "training goes on" in said[0]


def test_the_tensorboard_event_file_is_flushed_every_few_seconds_and_at_checkpoints(tmp_path, monkeypatch):
    """transformers flushes the event file at every logged step (~0.7 ms of a ~35 ms CPU step); launchpad's
    writer flushes at most every TENSORBOARD_FLUSH_SECONDS, whenever the runs mirror copies it, and at the end."""
    from types import SimpleNamespace

    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
    from transformers.integrations import TensorBoardCallback

    from launchpad.train.reporting import throttle_tensorboard_flush

    runs = tmp_path / "runs"
    monkeypatch.setenv("TENSORBOARD_LOGGING_DIR", str(runs))  # as integration_env sets it
    args = TrainingArguments(output_dir=str(tmp_path / "out"), report_to=["tensorboard"])
    tb = TensorBoardCallback()
    said: list[str] = []
    guarded = _guarded(TrainerCallback, tb, said.append)  # as guard_integrations leaves it in the trainer
    trainer = SimpleNamespace(callback_handler=SimpleNamespace(callbacks=[guarded]))  # what the function reads
    flush_now = throttle_tensorboard_flush(trainer, every_s=3600)
    state, control = TrainerState(is_world_process_zero=True), TrainerControl()
    guarded.on_train_begin(args, state, control, model=None)

    file_writer = tb.tb_writer.file_writer  # the real writer under transformers' SummaryWriter: count its flushes
    real_flush, flushes = file_writer.flush, []
    file_writer.flush = lambda: (flushes.append(1), real_flush())[1]
    for step in range(1, 51):
        state.global_step = step
        guarded.on_log(args, state, control, logs={"loss": 1.0 / step, "learning_rate": 1e-3})
    assert flushes == []  # 50 logged steps, not one flush (transformers alone: 50)
    flush_now()  # what the mirror does at a checkpoint
    assert len(flushes) == 1
    state.global_step = 51
    guarded.on_log(args, state, control, logs={"loss": 0.01})
    guarded.on_train_end(args, state, control)  # closes the writer: the rest reaches the disk
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # type: ignore[import-untyped]

    events = EventAccumulator(str(runs)).Reload()
    assert [e.step for e in events.Scalars("train/loss")] == list(range(1, 52)) and not said
