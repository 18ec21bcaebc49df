"""ARM's refusals mapped to what the lifecycle does next: capacity, quota and price -> the next offer
(scoped), credentials -> the provider is blocked with the missing action named, throttling and 5xx ->
retried (bounded). The refusals are INJECTED by the double (`fail_next`), at the request or, as an
allocation failure arrives on real Azure, in the create's asynchronous operation."""

from __future__ import annotations

import logging

import pytest
from azure_helpers import cheap_offer

from launchpad.errors import AuthError, NoCapacity, ProviderError, QuotaExceeded, TransientError
from launchpad.models import JOB_TAG, InstanceSpec

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]
QUOTA = ("Operation could not be completed as it results in exceeding approved standardNCADSA100v4Family Cores quota. "
         "Additional details - Deployment Model: Resource Manager, Location: eastus, Current Limit: 0, Current Usage: 0, "
         "Additional Required: 24, (Minimum) New Limit Required: 24.")
MAX_PRICE = ("Unable to perform operation 'Create VM' since the provided MaxPrice '0.01 USD' is lower than the current spot "
             "price '0.0432 USD' for Azure Spot VM size 'Standard_NV4as_v4' in region 'eastus'.")


def _vm_puts(arm):
    return [r for r in arm.requests if r.method == "PUT" and r.path.split("/")[-2] == "virtualMachines"]


def _spec(job="job-e"):
    return InstanceSpec(job_id=job, token=f"{job}-1", tags={JOB_TAG: job})


@pytest.mark.parametrize("code, message, at, cls, scope", [
    ("SkuNotAvailable", "The requested VM size is currently not available in location 'eastus'.", "request", NoCapacity,
     "offer"),
    ("AllocationFailed", "Allocation failed. We do not have sufficient capacity for the requested VM size in this region.",
     "operation", NoCapacity, "offer"),
    ("ZonalAllocationFailed", "Allocation failed in zone 1.", "operation", NoCapacity, "zone"),
    ("OverconstrainedAllocationRequest", "Allocation failed. VM(s) with the following constraints cannot be allocated",
     "operation", NoCapacity, "offer"),
    ("OperationNotAllowed", QUOTA, "request", QuotaExceeded, "region"),
    ("QuotaExceeded", "Quota exceeded", "request", QuotaExceeded, "region"),
    ("OperationNotAllowed", MAX_PRICE, "request", NoCapacity, "offer"),
    ("SpotMaxPriceTooLow", "max price too low", "request", NoCapacity, "offer"),
])
def test_capacity_quota_and_price_errors_scope_the_failover(azure, arm, code, message, at, cls, scope):
    arm.fail_next("PUT", "virtualMachines", code=code, message=message, status=409 if at == "request" else 200, at=at)
    with pytest.raises(cls) as e:
        azure.provision(cheap_offer(azure), _spec())
    assert type(e.value) is cls and e.value.scope == scope and code in str(e.value)
    # nothing of the failed node is left behind (the next offer may be in another region)
    arm.settle()
    assert [r["name"] for kind in ("virtualMachines", "networkInterfaces", "publicIPAddresses", "networkSecurityGroups",
                                   "disks") for r in arm.of_type(kind)] == []


def test_authorization_failed_names_the_missing_action(azure, arm):
    msg = ("The client 'ml@contoso.com' with object id '1a2b' does not have authorization to perform action "
           "'Microsoft.Compute/virtualMachines/write' over scope '/subscriptions/x/resourceGroups/launchpad-eastus/providers/"
           "Microsoft.Compute/virtualMachines/lp-job-e-0' or the scope is invalid.")
    arm.fail_next("PUT", "virtualMachines", code="AuthorizationFailed", message=msg, status=403)
    with pytest.raises(AuthError) as e:
        azure.provision(cheap_offer(azure), _spec())
    assert "Microsoft.Compute/virtualMachines/write" in str(e.value) and "least-privilege role" in str(e.value)


def test_a_rejected_token_is_an_auth_error(azure, arm):
    arm.fail_next("GET", "resourcegroups", code="ExpiredAuthenticationToken", message="The access token expiry UTC time "
                  "is earlier than current UTC time.", status=401)
    with pytest.raises(AuthError) as e:
        azure.provision(cheap_offer(azure), _spec())
    assert "rejected the credentials (ExpiredAuthenticationToken)" in str(e.value) and "az login" in str(e.value)


def test_throttling_and_5xx_are_retried_then_succeed(azure, arm):
    arm.fail_next("PUT", "virtualMachines", code="TooManyRequests", status=429)
    arm.fail_next("PUT", "networkInterfaces", code="InternalServerError", status=500)
    inst = azure.provision(cheap_offer(azure), _spec())
    assert [r.status for r in _vm_puts(arm)] == [429, 201]
    azure.teardown(inst)


def test_retries_are_bounded(azure, arm, monkeypatch):
    monkeypatch.setenv("LAUNCHPAD_AZURE_RETRIES", "2")
    arm.fail_next("PUT", "virtualMachines", code="ServiceUnavailable", status=503, times=10)
    with pytest.raises(TransientError):
        azure.provision(cheap_offer(azure), _spec())
    assert len(_vm_puts(arm)) == 2


def test_other_errors_are_one_line_provider_errors(azure, arm):
    arm.fail_next("PUT", "virtualMachines", code="InvalidParameter", message="The value of parameter imageReference.sku "
                  "is invalid.")
    with pytest.raises(ProviderError) as e:
        azure.provision(cheap_offer(azure), _spec())
    assert type(e.value) is ProviderError and str(e.value) == ("CreateVM in eastus: InvalidParameter: The value of "
                                                               "parameter imageReference.sku is invalid.")


def test_a_refused_role_grant_is_one_log_line_and_the_vm_still_runs(azure, arm, caplog):
    arm.fail_next("PUT", "roleAssignments", code="AuthorizationFailed", status=403, message="does not have authorization "
                  "to perform action 'Microsoft.Authorization/roleAssignments/write'")
    with caplog.at_level(logging.WARNING, logger="launchpad.azure"):
        inst = azure.provision(cheap_offer(azure), _spec())
    lines = [r.getMessage() for r in caplog.records if "may not stop itself" in r.getMessage()]
    assert len(lines) == 1 and "AuthorizationFailed" in lines[0] and "launchpad reap" in lines[0]
    assert arm.role_assignments == {} and arm.power(inst.id) == "running"
    azure.teardown(inst)


def test_a_new_identity_not_yet_in_the_directory_is_waited_for(azure, arm):
    arm.fail_next("PUT", "roleAssignments", code="PrincipalNotFound", status=400, message="Principal does not exist")
    inst = azure.provision(cheap_offer(azure), _spec())
    assert len(arm.role_assignments) == 1
    azure.teardown(inst)


def _lifecycle(azure, launchpad_home):
    from launchpad.lifecycle import Lifecycle
    from launchpad.state import StateDB

    return Lifecycle(StateDB(launchpad_home / "state.db"), {"azure": azure})


def _submit(lc, tmp_path, **resources):
    from pathlib import Path

    import yaml

    from launchpad.recipe import load_recipe

    repo = Path(__file__).resolve().parents[3]
    data = yaml.safe_load((repo / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(repo / "recipes" / "data" / "smoke-chat.jsonl")
    data["resources"] = {"gpu": "T4:1", **resources}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    return lc.submit(load_recipe(path), path.read_text(), provider="azure")


@pytest.mark.parametrize("code, scope", [("AllocationFailed", "offer"), ("OperationNotAllowed", "region"),
                                         ("ZonalAllocationFailed", "zone")])
def test_lifecycle_fails_over_by_the_scope_of_the_error(azure, arm, launchpad_home, tmp_path, code, scope):
    lc = _lifecycle(azure, launchpad_home)
    job = _submit(lc, tmp_path)
    arm.fail_next("PUT", "virtualMachines", code=code, message=QUOTA if code == "OperationNotAllowed" else code,
                  at="operation" if code != "OperationNotAllowed" else "request")
    inst = lc._ensure_instance(lc.db.job(job))
    [failed] = [e for e in lc.db.events(job) if e["kind"] == "provision:failed"]
    assert failed["data"]["scope"] == scope and failed["data"]["offer"] != inst.offer.label
    first_region = failed["data"]["offer"].split(", ")[1].rstrip(")")
    if scope == "region":
        assert inst.offer.region != first_region  # a quota is per region: skip the whole region
    azure.teardown(inst)


def test_lifecycle_blocks_the_provider_on_auth_errors(azure, arm, launchpad_home, tmp_path):
    from launchpad.errors import NoFeasibleOffer

    lc = _lifecycle(azure, launchpad_home)
    job = _submit(lc, tmp_path)
    arm.fail_next("PUT", "virtualMachines", code="AuthorizationFailed", status=403, times=99,
                  message="does not have authorization to perform action 'Microsoft.Compute/virtualMachines/write'")
    with pytest.raises(NoFeasibleOffer) as e:
        lc._ensure_instance(lc.db.job(job))
    assert len(_vm_puts(arm)) == 1  # blocked after the first: no second call with a missing permission
    assert "Microsoft.Compute/virtualMachines/write" in str(e.value)
