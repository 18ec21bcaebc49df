"""launchpad.train.reporting: which `report_to` integrations a run gets, and the TensorBoard mirror into the
store (what it sends, and that a store which refuses never ends the run). The end-to-end half -- the scalars
of a real run read back by TensorBoard from the store -- is in tests/test_lifecycle.py."""

from __future__ import annotations

from pathlib import Path

from launchpad.recipe import load_recipe
from launchpad.storage import open_store
from launchpad.train.reporting import RunsMirror, integration_env, report_to

REPO = Path(__file__).resolve().parents[2]


def test_integrations_follow_the_recipe_and_the_environment():
    said: list[str] = []
    plain = load_recipe(REPO / "recipes" / "smoke-lora.yaml")
    assert report_to(plain, env={}, log=said.append) == ["tensorboard"] and said == []
    wandb = load_recipe(REPO / "recipes" / "smoke-lora.yaml", {"wandb_project": "ft", "wandb_name": "run-1"})
    chosen = report_to(wandb, env={"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"}, log=said.append)
    assert chosen == ["tensorboard"]  # wandb and mlflow are not installed here: said, not fatal
    assert any("wandb is not installed" in s for s in said) and any("mlflow is not installed" in s for s in said)
    env = integration_env(wandb, Path("/w"))
    assert env == {"TENSORBOARD_LOGGING_DIR": "/w/runs", "WANDB_PROJECT": "ft", "WANDB_NAME": "run-1"}


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
