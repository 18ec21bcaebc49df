"""Provisioning on the ARM double: what a node is made of and how it is tagged, reconcile by tag, deallocate,
Spot and eviction, teardown that leaves nothing (orphans of a crash included), reaching the VM."""

from __future__ import annotations

import pytest
from arm_double import SUBSCRIPTION
from azure_helpers import cheap_offer

from launchpad.errors import NotYetTerminated, ProviderError
from launchpad.models import JOB_TAG, InstanceSpec, InstanceState, TeardownMode

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]
KINDS = ("virtualMachines", "disks", "networkInterfaces", "publicIPAddresses", "networkSecurityGroups")


def _spec(job="job-a", token="job-a-1", **kw):
    return InstanceSpec(job_id=job, token=token, tags={JOB_TAG: job}, **kw)


def _job(arm, job, kind="virtualMachines"):
    return [r for r in arm.of_type(kind) if (r.get("tags") or {}).get(JOB_TAG) == job]


def _left(arm):
    """Every job resource still there (the shared resource group and VNet are launchpad's, kept)."""
    return sorted(r["name"] for kind in KINDS for r in arm.of_type(kind)) + sorted(arm.role_assignments)


def test_check_and_describe(azure):
    assert azure.check() is None
    assert azure.regions() == ["eastus", "westus2"]
    assert azure.describe().startswith(f"subscription {SUBSCRIPTION[:8]}..., 2 regions: eastus, westus2; checkpoints: az://")


def test_check_names_the_fix(azure_config, monkeypatch):
    from launchpad_azure import AzureProvider

    no_sub = AzureProvider({k: v for k, v in azure_config.items() if k != "subscription_id"}).check()
    assert no_sub and "AZURE_SUBSCRIPTION_ID" in no_sub and "az account show" in no_sub and "\n" not in no_sub
    monkeypatch.delenv("AZURE_POD_IDENTITY_AUTHORITY_HOST")  # no managed identity here (169.254.169.254 is refused)
    no_cred = AzureProvider(azure_config).check()
    assert no_cred and no_cred.startswith("no Azure credentials") and "az login" in no_cred and "\n" not in no_cred


def test_offers_are_the_catalog_in_the_configured_regions(azure):
    offers = azure.offers()
    assert {o.region for o in offers} == {"eastus", "westus2"}
    types = {o.instance_type for o in offers}
    assert {"Standard_NC24ads_A100_v4", "Standard_ND96asr_v4", "Standard_ND96isr_H100_v5"} <= types


def test_a_node_is_a_tagged_vm_nic_ip_nsg_and_disk(azure, arm, azure_config):
    inst = azure.provision(cheap_offer(azure), _spec(disk_gb=300))
    tags = {JOB_TAG: "job-a", "launchpad-cluster": "job-a-1", "launchpad-node": "0"}
    for kind in KINDS:  # the OS disk too, which ARM creates untagged
        [r] = _job(arm, "job-a", kind)
        assert r["tags"] == tags, kind
    [vm] = _job(arm, "job-a")
    p = vm["properties"]
    assert p["storageProfile"]["osDisk"]["diskSizeGB"] == 300 and inst.data["disk_gb"] == 300
    assert p["storageProfile"]["imageReference"]["offer"] == "ubuntu-2204"  # the Data Science VM
    linux = p["osProfile"]["linuxConfiguration"]
    pub = open(azure_config["key"] + ".pub").read().split()[:2]
    assert linux["disablePasswordAuthentication"] is True and p["osProfile"]["adminUsername"] == "azureuser"
    assert linux["ssh"]["publicKeys"] == [{"path": "/home/azureuser/.ssh/authorized_keys", "keyData": " ".join(pub)}]
    assert "priority" not in p or p["priority"] == "Regular"
    [nsg] = _job(arm, "job-a", "networkSecurityGroups")
    [rule] = nsg["properties"]["securityRules"]
    assert rule["properties"]["sourceAddressPrefixes"] == ["127.0.0.1/32"] and rule["properties"]["destinationPortRange"] == "22"
    # the VM's own identity may act on this VM only: Virtual Machine Contributor, scoped to its id
    [ra] = arm.role_assignments.values()
    assert ra["properties"]["scope"] == vm["id"] and ra["properties"]["principalId"] == vm["identity"]["principalId"]
    assert ra["properties"]["roleDefinitionId"].endswith("/roleDefinitions/9980e02c-c2be-4d73-94e8-173b1dc7cf3c")
    # one resource group per region and its VNet, made once, tagged as launchpad's
    azure.provision(cheap_offer(azure), _spec("job-b", "job-b-1"))
    [rg] = [g for g in arm.of_type("resourceGroups")]
    assert rg["name"] == "launchpad-eastus" and rg["tags"] == {"launchpad-managed": "true"}
    assert [v["name"] for v in arm.of_type("virtualNetworks")] == ["launchpad-vnet"]
    assert inst.address and inst.address.startswith("203.0.113.")
    for i in azure.instances():
        azure.teardown(i)
    assert _left(arm) == []


def test_storage_scope_lets_the_vms_identity_write_checkpoints(azure_config, arm):
    from launchpad_azure import AzureProvider

    scope = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/data/providers/Microsoft.Storage/storageAccounts/ckpts"
    azure = AzureProvider({**azure_config, "storage_scope": scope})
    inst = azure.provision(cheap_offer(azure), _spec())
    [vm] = _job(arm, "job-a")
    roles = {ra["properties"]["scope"]: ra["properties"]["roleDefinitionId"].rsplit("/", 1)[1]
             for ra in arm.role_assignments.values() if ra["properties"]["principalId"] == vm["identity"]["principalId"]}
    assert roles == {vm["id"]: "9980e02c-c2be-4d73-94e8-173b1dc7cf3c", scope: "ba92f5b4-2d11-453d-a403-e96b0029c9fe"}
    azure.provision(cheap_offer(azure), _spec())  # again: the same assignments (by name), no duplicate
    assert len(arm.role_assignments) == 2
    azure.teardown(inst)
    assert arm.role_assignments == {}


def test_provision_twice_with_one_token_is_one_vm_and_a_new_token_finds_it_by_tag(azure, arm):
    offer = cheap_offer(azure)
    first = azure.provision(offer, _spec())
    puts = sum(1 for r in arm.requests if r.method == "PUT" and r.path.endswith("/virtualMachines/" + first.id))
    assert azure.provision(offer, _spec()).id == first.id
    assert azure.provision(offer, _spec(token="job-a-2")).id == first.id  # the state DB's token lost: found by tag
    assert len(_job(arm, "job-a")) == 1 and len(_job(arm, "job-a", "publicIPAddresses")) == 1
    assert sum(1 for r in arm.requests if r.method == "PUT" and r.path.endswith("/virtualMachines/" + first.id)) == puts
    azure.teardown(first)


def test_stop_deallocates_and_a_deallocated_vm_is_started_not_duplicated(azure, arm):
    offer = cheap_offer(azure)
    inst = azure.provision(offer, _spec())
    azure.teardown(inst, TeardownMode.STOP)
    assert arm.power(inst.id) == "deallocated" and azure.status(inst) is InstanceState.STOPPED
    assert not any(r.path.endswith("/powerOff") for r in arm.requests)  # never a guest power-off: it keeps billing
    [found] = azure.instances()
    assert found.id == inst.id and found.state is InstanceState.STOPPED and found.data["disk_gb"] == 256  # the disk bills
    again = azure.provision(offer, _spec(token="job-a-2"))
    assert again.id == inst.id and arm.power(inst.id) == "running" and len(_job(arm, "job-a")) == 1
    azure.teardown(inst)


def test_spot_vm_body_extras_and_teardown(azure, arm):
    inst = azure.provision(cheap_offer(azure, spot=True), _spec(autostop_action=TeardownMode.STOP))
    [vm] = _job(arm, "job-a")
    p = vm["properties"]
    assert (p["priority"], p["evictionPolicy"], p["billingProfile"]) == ("Spot", "Delete", {"maxPrice": -1.0})
    extras = azure.job_spec_extras(inst)
    assert extras["preemption"] == ["azure"] and extras["autostop"]["action"] == "terminate"
    azure.teardown(inst, TeardownMode.STOP)  # a spot VM is never kept: deleted
    assert azure.status(inst) is InstanceState.TERMINATED and _left(arm) == []


@pytest.mark.parametrize("policy", ["Delete", "Deallocate"])
def test_an_evicted_spot_vm_reads_as_preempted(azure, arm, azure_config, policy):
    from launchpad_azure import AzureProvider

    azure = AzureProvider({**azure_config, "eviction_policy": policy, "max_price": 0.5})
    inst = azure.provision(cheap_offer(azure, spot=True), _spec())
    assert _job(arm, "job-a")[0]["properties"]["billingProfile"] == {"maxPrice": 0.5}
    azure.account.compute.virtual_machines.simulate_eviction("launchpad-eastus", inst.id)  # the real ARM action
    arm.settle()
    assert azure.status(inst) is InstanceState.PREEMPTED
    azure.teardown(inst)
    assert azure.status(inst) is InstanceState.TERMINATED and _left(arm) == []


def test_instances_across_regions_and_teardown_twice(azure, arm):
    a = azure.provision(cheap_offer(azure), _spec())
    b = azure.provision(cheap_offer(azure, region="westus2"), _spec("job-b", "job-b-1"))
    found = {i.id: i for i in azure.instances()}
    assert set(found) == {a.id, b.id} and found[b.id].data["region"] == "westus2" and found[b.id].job_id == "job-b"
    for inst in (a, b):
        azure.teardown(inst)
        azure.teardown(inst)
        assert azure.status(inst) is InstanceState.TERMINATED
    assert azure.instances() == [] and _left(arm) == []


def test_orphans_of_a_crash_between_creates_are_found_by_tag_and_torn_down(azure, arm):
    arm.fail_next("PUT", "networkInterfaces", code="InternalOperationError", status=400, message="the crash")
    with pytest.raises(ProviderError):
        azure.provision(cheap_offer(azure), _spec())
    assert sorted(r["name"].rsplit("-", 1)[1] for r in arm.of_type("publicIPAddresses") + arm.of_type("networkSecurityGroups")) \
        == ["ip", "nsg"]  # made before the crash, no VM
    [orphan] = azure.instances()
    assert orphan.job_id == "job-a" and orphan.state is InstanceState.UNKNOWN  # may bill (the IP): not "gone"
    azure.teardown(orphan)
    assert _left(arm) == [] and azure.instances() == []


def test_a_delete_accepted_but_not_finished_is_not_yet_terminated(azure, arm, azure_config):
    from launchpad_azure import AzureProvider

    inst = azure.provision(cheap_offer(azure), _spec())
    arm.lro_seconds = 1.0
    impatient = AzureProvider({**azure_config, "delete_wait": 0})
    with pytest.raises(NotYetTerminated):
        impatient.teardown(inst)
    assert azure.status(inst) is InstanceState.TERMINATED  # deleting: it bills no more
    arm.settle()
    impatient.teardown(inst)  # the VM is gone now: its NIC, IP, NSG and disk go
    assert _left(arm) == []


def test_the_vm_is_reached_over_ssh_with_its_host_key_pinned_per_vm(azure, vm_sshd):
    inst = azure.provision(cheap_offer(azure), _spec())
    target = azure.ssh_target(inst)
    assert target.host == "127.0.0.1" and target.port == vm_sshd.port  # via the ssh config's Host *
    assert azure.connection(inst).run(["true"]).rc == 0
    assert azure._known_hosts_path(inst.id).read_text().strip()  # trusted on first use, for this VM only
    azure.teardown(inst)
    assert not azure._known_hosts_path(inst.id).exists()


def test_multi_node_nodes_share_the_vnet_and_know_the_master(azure, arm):
    offer = cheap_offer(azure)
    inst = azure.provision(offer, _spec(nodes=2))
    assert len(_job(arm, "job-a")) == 2
    nodes = azure.nodes(inst)
    assert [n.data.get("node_rank", 0) for n in nodes] == [0, 1]
    extras = azure.job_spec_extras(nodes[1])
    assert extras["node_rank"] == 1 and extras["master_addr"] == inst.data["nodes"][0]["private"]
    assert azure.provision(offer, _spec(nodes=2)).id == inst.id and len(_job(arm, "job-a")) == 2
    azure.teardown(inst)
    assert _left(arm) == []


def test_use_private_ip_makes_no_public_address(azure_config, arm):
    from launchpad_azure import AzureProvider

    azure = AzureProvider({**azure_config, "use_private_ip": True})
    inst = azure.provision(cheap_offer(azure), _spec())
    assert arm.of_type("publicIPAddresses") == [] and inst.address is None
    assert inst.data["nodes"][0]["private"].startswith("10.0.")
    azure.teardown(inst)
    assert _left(arm) == []


def test_launchpad_check_shows_azure_usable(run_cli, azure_config):
    import json

    rows = {r["provider"]: r for r in json.loads(run_cli("check", "--json", check=True).stdout)["providers"]}
    assert rows["azure"]["usable"] and "2 regions: eastus, westus2" in rows["azure"]["detail"]  # the entry point, config.yaml
