"""The README's least-privilege custom role names every action the provider's calls need (the double
derives each request's RBAC action, and the join actions of the resources it references, as ARM checks
them): a user who is assigned that role never meets an AuthorizationFailed from launchpad's own calls."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from azure_helpers import cheap_offer

from launchpad.models import JOB_TAG, InstanceSpec, TeardownMode

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]
README = Path(__file__).resolve().parents[3] / "README.md"


def readme_role() -> dict:
    text = README.read_text()
    section = text[text.index("## Azure"):]
    section = section[section.index("**Least-privilege custom role**"):]
    found = re.search(r"```json\n(.*?)```", section, re.S)
    assert found, "the README's custom role block is missing"
    return json.loads(found.group(1))


def test_every_action_the_provider_needs_is_in_the_readme_role(azure, arm):
    azure.check()
    offer = cheap_offer(azure)
    inst = azure.provision(offer, InstanceSpec(job_id="rbac", token="rbac-1", tags={JOB_TAG: "rbac"}, nodes=2))
    azure.status(inst)
    azure.instances()
    azure.ssh_target(inst)
    azure.teardown(inst, TeardownMode.STOP)
    azure.provision(offer, InstanceSpec(job_id="rbac", token="rbac-2", tags={JOB_TAG: "rbac"}, nodes=2))  # starts it
    azure.teardown(inst)
    needed = {a for r in arm.requests if r.principal is None for a in r.actions}
    role = readme_role()
    assert {"Microsoft.Compute/virtualMachines/deallocate/action", "Microsoft.Authorization/roleAssignments/write",
            "Microsoft.Network/networkInterfaces/join/action"} <= needed  # the recording works
    assert needed - set(role["Actions"]) == set(), "add these to the README's custom role"
    assert role["IsCustom"] and role["AssignableScopes"] == ["/subscriptions/SUBSCRIPTION_ID"]
