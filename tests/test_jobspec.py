"""The one typed job spec (launchpad/jobspec.py): built once from the recipe, changed only by copy, read
on the instance through one loader; the resolved checkpoint store is kept in the state DB."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launchpad.errors import BadInput
from launchpad.jobspec import AutostopSpec, JobSpec, Node
from launchpad.recipe import load_recipe

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def recipe():
    return load_recipe(REPO / "recipes" / "smoke-lora.yaml")


def test_built_from_the_recipe_with_env_names_only(recipe):
    recipe = recipe.model_copy(update={"env": {"HF_TOKEN": "${env:MY_SECRET}"}})
    spec = JobSpec.from_recipe("smoke-lora-abc123", recipe, max_steps=10)
    assert spec.env_names == ("HF_TOKEN",) and spec.max_steps == 10
    assert spec.autostop == AutostopSpec(idle_minutes=recipe.autostop.idle_minutes, action=recipe.autostop.action)
    assert spec.recipe["env"] == {"HF_TOKEN": "${env:MY_SECRET}"}  # as written: resolved only at launch


def test_copy_with_changes_and_json_round_trip(recipe, tmp_path):
    spec = JobSpec.from_recipe("j-1", recipe)
    node = spec.replace(workdir=str(tmp_path), status_path=str(tmp_path / "status.json"), checkpoint_uri="file:///s",
                        autostop={"command": ["rm", "-rf", "--", "/claim"]},
                        nodes=[{"rank": 0, "address": "10.0.0.5"}, {"rank": 1, "address": "10.0.0.6"}],
                        node_rank=1, master_addr="10.0.0.5", master_port=29500, preemption=["aws"])
    assert spec.workdir is None and node.autostop.command == ("rm", "-rf", "--", "/claim")
    assert node.autostop.idle_minutes == spec.autostop.idle_minutes  # only what was named changed
    assert node.nodes == (Node(0, "10.0.0.5"), Node(1, "10.0.0.6"))
    node.write(tmp_path / "job.json")
    assert (tmp_path / "job.json").stat().st_mode & 0o777 == 0o600
    assert JobSpec.load(tmp_path / "job.json") == node


@pytest.mark.parametrize("change,field", [
    ({"job_id": "a/../b"}, "job_id"), ({"workdir": "relative"}, "workdir"), ({"max_steps": 0}, "max_steps"),
    ({"autostop": {"command": "shutdown -h now"}}, "autostop.command"), ({"recipe": None}, "recipe"),
    ({"checkpoint_uri": None}, "checkpoint_uri"), ({"nodes": [{"rank": 0, "address": "h; rm -rf /"}]}, "nodes"),
])
def test_the_loader_names_the_bad_field(recipe, tmp_path, change, field):
    data = JobSpec.from_recipe("j-1", recipe).replace(
        workdir=str(tmp_path), status_path=str(tmp_path / "s.json"), checkpoint_uri="file:///s").to_json()
    data.update(change)
    (tmp_path / "job.json").write_text(json.dumps(data))
    with pytest.raises(BadInput, match=field):
        JobSpec.load(tmp_path / "job.json")


def test_the_resolved_store_is_kept_so_resume_does_not_depend_on_a_default(recipe, launchpad_home, tmp_path,
                                                                           monkeypatch):
    """The provider's default store is resolved at the first sync and written into the stored spec: when
    the default changes later (another LAUNCHPAD_HOME here), the job still goes to its first store."""
    from launchpad_local import LocalProvider

    from launchpad.lifecycle import Lifecycle
    from launchpad.state import StateDB

    lc = Lifecycle(StateDB.open(), {"local": LocalProvider()})
    job_id = lc.submit(recipe, "name: smoke-lora\n")
    assert lc.db.job(job_id).spec.checkpoint_uri is None  # the recipe names none
    instance = lc._ensure_instance(lc.db.job(job_id))
    first = lc._bundle(lc.db.job(job_id), lc.provider("local"), instance).job_spec.checkpoint_uri
    assert first == (launchpad_home / "checkpoints").as_uri() == lc.db.job(job_id).spec.checkpoint_uri

    monkeypatch.setenv("LAUNCHPAD_HOME", str(tmp_path / "elsewhere"))  # the provider's default moves
    assert LocalProvider().default_checkpoint_uri() != first
    again = lc._bundle(lc.db.job(job_id), LocalProvider(), instance).job_spec.checkpoint_uri
    assert again == first
    lc.provider("local").teardown(instance)



@pytest.mark.parametrize("action, needs_stop", [(None, False), ("stop", True), ("terminate", False)])
def test_a_resumed_job_plans_as_the_user_wrote_it_not_with_defaults_made_explicit(tmp_path, action, needs_stop):
    """`autostop.action: stop` rules out providers that cannot stop only when the user wrote it: the spec a
    `resume` plans from (stored as JSON, reloaded) must keep a default a default."""
    import shutil

    import yaml

    from launchpad.planner.need import need_from_recipe

    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data["autostop"] = {"idle_minutes": 5, **({"action": action} if action else {})}
    shutil.copytree(REPO / "recipes" / "data", tmp_path / "data")
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(data))
    fresh = load_recipe(tmp_path / "r.yaml")
    stored = JobSpec.from_json(json.loads(JobSpec.from_recipe("j-1", fresh).dumps()))
    assert need_from_recipe(fresh).needs_stop is needs_stop
    assert need_from_recipe(stored.recipe_model()).needs_stop is needs_stop
    assert stored.recipe_model().model_dump() == fresh.model_dump()  # nothing else changes
