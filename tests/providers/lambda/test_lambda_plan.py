"""What Lambda lacks, as the planner and the user see it: `autostop.action: stop` and `resources.spot: true`
rule Lambda's offers out with Lambda's own reason; a recipe that leaves the autostop action at its default
runs there (idle instances are terminated instead)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from lambda_helpers import API_KEY

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]
REPO = Path(__file__).resolve().parents[3]


def _recipe(tmp_path, **changes):
    from launchpad.recipe import load_recipe

    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    for key, value in changes.items():
        data[key] = {**(data.get(key) or {}), **value}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, load_recipe(path)


def _plan(provider, recipe):
    from launchpad.planner import plan

    return plan(recipe, {"lambda": provider}, include_catalog=False)


def test_a_default_autostop_runs_on_lambda_and_terminates(lambda_provider, tmp_path):
    _, recipe = _recipe(tmp_path)
    planned = _plan(lambda_provider, recipe)
    assert planned.ranked and {r.offer.provider for r in planned.ranked} == {"lambda"}
    assert not planned.ranked[0].breakdown.get("stopped_usd_per_day")  # nothing bills stopped on Lambda


def test_autostop_stop_is_refused_with_lambdas_reason(lambda_provider, tmp_path, run_cli):
    path, recipe = _recipe(tmp_path, autostop={"action": "stop"})
    planned = _plan(lambda_provider, recipe)
    assert not planned.ranked
    reasons = {r.reason for r in planned.rejected if r.code == "stop"}
    assert reasons == {"Lambda Cloud cannot stop instances, only terminate them (launchpad terminates idle and finished "
                       "ones; a resume starts a new instance from the last checkpoint); the recipe sets autostop.action: stop"}
    shown = run_cli("plan", str(path), "--provider", "lambda", env={"LAMBDA_API_KEY": API_KEY})
    assert shown.returncode != 0 and "Lambda Cloud cannot stop instances" in " ".join((shown.stdout + shown.stderr).split())


def test_spot_is_refused_with_lambdas_reason(lambda_provider, tmp_path):
    _, recipe = _recipe(tmp_path, resources={"spot": True})
    planned = _plan(lambda_provider, recipe)
    assert not planned.ranked
    # (the planner names the missing spot price before the capability: the offers have none)
    assert planned.rejected and {r.code for r in planned.rejected} == {"spot"}
