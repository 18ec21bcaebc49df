"""Managed recovery without training: bad input is one line and exit 2 before anything is created, and
each strategy rules out the offers it should (a real state DB, real offers)."""

from __future__ import annotations

import pytest
from test_lifecycle import SMOKE

from launchpad.jobspec import JobSpec
from launchpad.lifecycle import Lifecycle
from launchpad.models import Offer
from launchpad.recipe import load_recipe
from launchpad.state import JobOptions, StateDB


@pytest.mark.parametrize("args, expected", [
    (("up", "recipes/smoke-lora.yaml", "--strategy", "west"), "--strategy west: unknown strategy"),
    (("up", "recipes/smoke-lora.yaml", "--max-restarts", "-1"), "--max-restarts -1: must be 0 or more"),
    (("resume", "some-job", "--same-offer"), "--same-offer: only with --from"),
    (("resume", "--from", "s3:/bucket"), "--from s3:/bucket"),
    (("resume", "--from", "file:///nonexistent/store/job-1"), "no job.json at file:///nonexistent/store/job-1"),
    (("watch", "--interval", "0"), "--interval 0"),
])
def test_bad_recovery_input_is_one_line_and_exit_2(run_cli, launchpad_home, args, expected):
    proc = run_cli(*args, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert expected in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (launchpad_home / "state.db").exists() or args[0] != "up"


def _offer(region: str, itype: str = "g5.xlarge", spot: bool = False) -> Offer:
    return Offer(provider="aws", instance_type=itype, region=region, gpu="A10G", gpu_count=1, price_per_hour=1.0,
                 spot=spot)


@pytest.mark.parametrize("strategy, allowed", [
    ("anywhere", {"us-east-1 reclaimed", "us-east-1 other", "us-west-2", "eu-west-1"}),
    ("same-region", {"us-east-1 reclaimed", "us-east-1 other"}),
    ("next-region", {"us-west-2", "eu-west-1"}),
])
def test_each_strategy_rules_out_what_it_should(launchpad_home, strategy, allowed):
    db = StateDB(launchpad_home / "state.db")
    recipe = load_recipe(str(SMOKE))
    spec = JobSpec.from_recipe("job-1", recipe)
    db.create_job("job", None, spec, "", JobOptions(recover=True, strategy=strategy))
    lost = _offer("us-east-1", spot=True)
    db.add_event("job-1", "preempted", {"offer": lost.label, "provider": "aws", "region": "us-east-1"})
    lc = Lifecycle(db, {})
    blocked = lc._recovery_blockers("job-1", list(db.events("job-1")))
    offers = {"us-east-1 reclaimed": lost, "us-east-1 other": _offer("us-east-1", "g5.2xlarge"),
              "us-west-2": _offer("us-west-2"), "eu-west-1": _offer("eu-west-1")}
    assert {name for name, o in offers.items() if not any(b(o) for b in blocked)} == allowed
    assert lc._reclaimed_offers(list(db.events("job-1"))) == {lost.label}  # tried last, never skipped
    assert lc.options("job-1").strategy == strategy and lc.restarts_used("job-1") == 0
    db.add_event("job-1", "auto-resume", {})
    assert lc.restarts_used("job-1") == 1
    lc.arm_recovery("job-1", JobOptions(recover=True, max_restarts=5, strategy="anywhere"))  # `resume --recover`
    assert lc.restarts_used("job-1") == 0 and lc.options("job-1").max_restarts == 5
