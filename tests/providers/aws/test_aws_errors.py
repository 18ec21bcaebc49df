"""EC2's refusals mapped to what the lifecycle does next: capacity and quota -> the next offer (scoped),
credentials -> the provider is blocked with the missing permission named, throttling -> retried.
The refusals are INJECTED (moto never runs out of capacity) through botocore's before-call event."""

from __future__ import annotations

import pytest
from aws_helpers import cheap_offer, inject_error

from launchpad.errors import AuthError, NoCapacity, QuotaExceeded
from launchpad.models import JOB_TAG, InstanceSpec

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


def _spec(job="job-e"):
    return InstanceSpec(job_id=job, token=f"{job}-1", tags={JOB_TAG: job})


@pytest.mark.parametrize("code, cls, scope", [
    ("InsufficientInstanceCapacity", NoCapacity, "zone"),
    ("InstanceLimitExceeded", QuotaExceeded, "region"),
    ("VcpuLimitExceeded", QuotaExceeded, "region"),
    ("MaxSpotInstanceCountExceeded", QuotaExceeded, "region"),
    ("SpotMaxPriceTooLow", NoCapacity, "offer"),
    ("Unsupported", NoCapacity, "offer"),
])
def test_capacity_and_quota_errors_scope_the_failover(aws, code, cls, scope):
    inject_error(aws, "RunInstances", code)
    with pytest.raises(cls) as e:
        aws.provision(cheap_offer(aws), _spec())
    assert type(e.value) is cls and e.value.scope == scope and code in str(e.value)


def test_unauthorized_names_the_missing_permission(aws):
    msg = ("You are not authorized to perform this operation. User: arn:aws:iam::123456789012:user/ml is not "
           "authorized to perform: ec2:RunInstances on resource: arn:aws:ec2:us-east-1::instance/*")
    inject_error(aws, "RunInstances", "UnauthorizedOperation", msg, status=403)
    with pytest.raises(AuthError) as e:
        aws.provision(cheap_offer(aws), _spec())
    assert "ec2:RunInstances" in str(e.value) and "IAM policy" in str(e.value)


def test_throttling_is_retried_then_succeeds(aws, monkeypatch):
    seen = inject_error(aws, "RunInstances", "RequestLimitExceeded", status=503, times=2)
    inst = aws.provision(cheap_offer(aws), _spec())
    assert len(seen) == 3 and inst.id.startswith("i-")
    aws.teardown(inst)


def test_retries_are_bounded(aws, monkeypatch):
    monkeypatch.setenv("LAUNCHPAD_AWS_RETRIES", "2")
    from launchpad.errors import TransientError

    seen = inject_error(aws, "RunInstances", "InternalError", status=500, times=10)
    with pytest.raises(TransientError):
        aws.provision(cheap_offer(aws), _spec())
    assert len(seen) == 2


def _lifecycle(aws, launchpad_home):
    from launchpad.lifecycle import Lifecycle
    from launchpad.state import StateDB

    return Lifecycle(StateDB(launchpad_home / "state.db"), {"aws": aws})


def _submit(lc, tmp_path, **resources):
    from pathlib import Path

    import yaml

    from launchpad.recipe import load_recipe

    repo = Path(__file__).resolve().parents[3]
    data = yaml.safe_load((repo / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(repo / "recipes" / "data" / "smoke-chat.jsonl")
    data["resources"] = {"gpu": "A10G:1", "regions": ["us-east-1"], **resources}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    return lc.submit(load_recipe(path), path.read_text(), provider="aws")


def test_lifecycle_moves_to_the_next_zone_after_a_capacity_error(aws, launchpad_home, tmp_path):
    lc = _lifecycle(aws, launchpad_home)
    job = _submit(lc, tmp_path)
    inject_error(aws, "RunInstances", "InsufficientInstanceCapacity")
    inst = lc._ensure_instance(lc.db.job(job))
    events = [e for e in lc.db.events(job) if e["kind"].startswith("provision:")]
    failed = [e for e in events if e["kind"] == "provision:failed"]
    assert len(failed) == 1 and failed[0]["data"]["scope"] == "zone"
    assert f", {inst.offer.zone})" not in failed[0]["data"]["offer"]  # another zone, not only another offer
    assert failed[0]["data"]["offer"] != inst.offer.label
    aws.teardown(inst)


def test_lifecycle_blocks_the_provider_on_auth_errors(aws, launchpad_home, tmp_path):
    from launchpad.errors import NoFeasibleOffer

    lc = _lifecycle(aws, launchpad_home)
    job = _submit(lc, tmp_path)
    seen = inject_error(aws, "RunInstances", "AuthFailure", "AWS was not able to validate the credentials", times=99)
    with pytest.raises(NoFeasibleOffer) as e:
        lc._ensure_instance(lc.db.job(job))
    assert len(seen) == 1  # blocked after the first: no second call with rejected credentials
    assert "rejected the credentials" in str(e.value)
