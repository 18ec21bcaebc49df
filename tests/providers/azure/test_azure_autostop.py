"""The idle watchdog's autostop on Azure, run for real: the command the provider puts in the job spec, executed
as the agent would (argv, no shell), gets a token of the VM's own managed identity from an IMDS double and
deallocates (stop) or deletes (terminate) the VM through the ARM double, which allows that identity exactly
what its role assignment (scoped to the VM) allows."""

from __future__ import annotations

import os
import subprocess

import pytest
from arm_double import ImdsIdentity
from azure_helpers import cheap_offer

from launchpad.models import JOB_TAG, InstanceSpec, InstanceState, TeardownMode

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


def _run_as_the_vm(arm, vm_name: str, command: list[str]) -> subprocess.CompletedProcess:
    [vm] = [v for v in arm.of_type("virtualMachines") if v["name"] == vm_name]
    with ImdsIdentity(arm.token_for(vm["identity"]["principalId"])) as vm_imds:
        env = {"PATH": os.environ["PATH"], "LAUNCHPAD_AZURE_IMDS": vm_imds.url}  # nothing else: no credentials here
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_autostop_deallocates_the_vm_with_its_own_identity(azure, arm):
    inst = azure.provision(cheap_offer(azure), InstanceSpec(job_id="idle", token="idle-1", tags={JOB_TAG: "idle"}))
    autostop = azure.job_spec_extras(inst)["autostop"]
    assert autostop["action"] == "stop" and autostop["command"][-1] == "stop"
    res = _run_as_the_vm(arm, inst.id, autostop["command"])
    assert res.returncode == 0, res.stderr
    arm.settle()
    assert arm.power(inst.id) == "deallocated" and azure.status(inst) is InstanceState.STOPPED
    [call] = [r for r in arm.requests if r.path.endswith("/deallocate")]
    assert call.principal == arm.of_type("virtualMachines")[0]["identity"]["principalId"]  # the VM's identity, not ours
    azure.teardown(inst)


def test_autostop_terminate_deletes_the_vm_and_leaves_the_rest_to_down(azure, arm):
    spec = InstanceSpec(job_id="done", token="done-1", tags={JOB_TAG: "done"}, autostop_action=TeardownMode.TERMINATE)
    inst = azure.provision(cheap_offer(azure), spec)
    res = _run_as_the_vm(arm, inst.id, azure.job_spec_extras(inst)["autostop"]["command"])
    assert res.returncode == 0, res.stderr
    arm.settle()
    # the OS disk and the NIC go with the VM (deleteOption: Delete); the IP and NSG are outside the VM's grant
    assert arm.of_type("virtualMachines") == arm.of_type("disks") == arm.of_type("networkInterfaces") == []
    [left] = azure.instances()
    assert left.job_id == "done" and left.state is InstanceState.UNKNOWN
    azure.teardown(left)
    assert arm.of_type("publicIPAddresses") == arm.of_type("networkSecurityGroups") == [] and arm.role_assignments == {}


def test_a_vms_identity_cannot_touch_another_vm(azure, arm):
    a = azure.provision(cheap_offer(azure), InstanceSpec(job_id="a", token="a-1", tags={JOB_TAG: "a"}))
    b = azure.provision(cheap_offer(azure), InstanceSpec(job_id="b", token="b-1", tags={JOB_TAG: "b"}))
    command = azure.job_spec_extras(b)["autostop"]["command"]
    res = _run_as_the_vm(arm, a.id, command)  # a's identity, b's deallocate
    assert res.returncode == 1 and "HTTP 403" in res.stderr and "AuthorizationFailed" in res.stderr
    assert arm.power(b.id) == "running"
    for inst in (a, b):
        azure.teardown(inst)
