"""Compute Engine's refusals mapped to what the lifecycle does next: a stockout -> the next zone, a regional
quota -> the next region, the global GPU quota -> the next offer, a missing permission -> gcp is blocked with
the permission named, 429/5xx -> retried (bounded). The refusals are INJECTED into the double
(`fail_next`): nothing here can run a real zone out of GPUs."""

from __future__ import annotations

import pytest
from gcp_helpers import cheap_offer

from launchpad.errors import AuthError, NoCapacity, QuotaExceeded, TransientError
from launchpad.models import JOB_TAG, InstanceSpec

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


def _spec(job="job-e"):
    return InstanceSpec(job_id=job, token=f"{job}-1", tags={JOB_TAG: job})


@pytest.mark.parametrize("code, message, http, cls, scope", [
    ("ZONE_RESOURCE_POOL_EXHAUSTED", "The zone 'projects/p/zones/us-central1-a' does not have enough resources "
     "available to fulfill the request. Try a different zone, or try again later.", None, NoCapacity, "zone"),
    ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "The zone does not have enough resources available to fulfill the "
     "request. '(resource type:compute)'.", None, NoCapacity, "zone"),
    ("QUOTA_EXCEEDED", "Quota 'NVIDIA_T4_GPUS' exceeded.  Limit: 0.0 in region us-central1.", None, QuotaExceeded,
     "region"),
    ("QUOTA_EXCEEDED", "Quota 'GPUS_ALL_REGIONS' exceeded.  Limit: 0.0 globally.", None, QuotaExceeded, "offer"),
    ("quotaExceeded", "Quota 'CPUS' exceeded.  Limit: 24.0 in region us-central1.", 403, QuotaExceeded, "region"),
    ("invalid", "Invalid value for field 'resource.machineType': 'zones/us-central1-a/machineTypes/a2-highgpu-1g'. "
     "Machine type with name 'a2-highgpu-1g' does not exist in zone 'us-central1-a'.", 400, NoCapacity, "zone"),
])
def test_capacity_and_quota_errors_scope_the_failover(gcp, gce, code, message, http, cls, scope):
    gce.fail_next("POST", "instances", code, message, http=http)
    with pytest.raises(cls) as e:
        gcp.provision(cheap_offer(gcp), _spec())
    assert type(e.value) is cls and e.value.scope == scope and "\n" not in str(e.value)
    assert gce.live() == []


def test_a_missing_permission_is_named(gcp, gce):
    gce.fail_next("POST", "instances", "forbidden", "Required 'compute.instances.create' permission for "
                  "'projects/lp-test-project/zones/us-central1-a/instances/lp-1'", http=403)
    with pytest.raises(AuthError) as e:
        gcp.provision(cheap_offer(gcp), _spec())
    assert "compute.instances.create" in str(e.value) and "README" in str(e.value)


def test_rejected_credentials_block_the_provider(gcp, gce):
    gce.public_keys, keys = [], gce.public_keys  # the key is no longer the account's
    try:
        with pytest.raises(AuthError) as e:
            gcp.offers()
        assert "rejected the credentials" in str(e.value)
    finally:
        gce.public_keys = keys


def test_throttling_is_retried_then_succeeds(gcp, gce):
    gce.fail_next("POST", "instances", "rateLimitExceeded", "Rate Limit Exceeded", http=429, times=2)
    inst = gcp.provision(cheap_offer(gcp), _spec())
    posts = [r for r in gce.requests if r[0] == "POST" and r[1].endswith("/instances")]
    assert len(posts) == 3 and len(gce.live()) == 1
    gcp.teardown(inst)


def test_retries_are_bounded(gcp, gce, monkeypatch):
    monkeypatch.setenv("LAUNCHPAD_GCP_RETRIES", "2")
    gce.fail_next("POST", "instances", "backendError", "Internal error", http=503, times=10)
    with pytest.raises(TransientError):
        gcp.provision(cheap_offer(gcp), _spec())
    assert len([r for r in gce.requests if r[0] == "POST" and r[1].endswith("/instances")]) == 2


def test_the_project_comes_from_the_key_file_else_the_fix_is_named(gcp_config, gce, monkeypatch, tmp_path):
    import json
    import os
    from pathlib import Path

    from launchpad_gcp import GCPProvider

    without = {k: v for k, v in gcp_config.items() if k != "project"}
    assert GCPProvider(without).check() is None  # the key file names the project
    key = json.loads(Path(os.environ["GOOGLE_APPLICATION_CREDENTIALS"]).read_text())
    key.pop("project_id")
    (tmp_path / "key.json").write_text(json.dumps(key))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "key.json"))
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT", raising=False)
    reason = GCPProvider(without).check()
    assert reason and "no Google Cloud project" in reason and "project:" in reason
