"""One node of a job: a VM and the four resources it needs (NIC, public IP, NSG, OS disk), named
deterministically from the attempt's token and the node's rank, tagged alike, created and deleted together.

Names: ``lp-<job>-<hash of token>-<rank>`` for the VM and its OS disk/NIC/IP/NSG with the suffixes
``-osdisk``, ``-nic``, ``-ip``, ``-nsg``. A repeated create is therefore a repeated ARM PUT of the same
names: create-or-update, never a duplicate. Order matters to ARM: the NIC needs the IP and NSG, the VM
needs the NIC; deletion runs backwards (a NIC held by a VM, or an IP/NSG held by a NIC, cannot go).
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from typing import Any

from launchpad.errors import LaunchpadError, NoCapacity
from launchpad.models import InstanceSpec, InstanceState, Offer

from .api import call

log = logging.getLogger("launchpad.azure")

SUFFIXES = {"nic": "-nic", "ip": "-ip", "nsg": "-nsg", "disk": "-osdisk"}
DEFAULT_ROOT_GB = 256  # the Data Science VM's image is ~150 GB
DEFAULT_USER = "azureuser"


def base_name(job_id: str, token: str, rank: int) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", job_id.lower()).strip("-")[:40].strip("-") or "job"
    return f"lp-{slug}-{hashlib.sha256(token.encode()).hexdigest()[:6]}-{rank}"


def base_of(resource_name: str) -> str:
    """The node's base (VM) name of one of its resources."""
    for suffix in SUFFIXES.values():
        if resource_name.endswith(suffix):
            return resource_name[: -len(suffix)]
    return resource_name


def vm_state(vm: dict | None) -> InstanceState:
    """The launchpad state of a VM as ARM returns it with its instance view (None: it does not exist)."""
    if vm is None:
        return InstanceState.TERMINATED
    props = vm.get("properties") or {}
    statuses = [s.get("code", "") for s in (props.get("instanceView") or {}).get("statuses") or []]
    power = next((c.split("/", 1)[1] for c in statuses if c.startswith("PowerState/")), None)
    provisioning = str(props.get("provisioningState") or "")
    spot = props.get("priority") == "Spot"
    if provisioning == "Deleting":
        return InstanceState.TERMINATED  # on its way out: it bills no more
    if provisioning == "Failed":
        return InstanceState.UNKNOWN  # ARM keeps a failed create; it may hold an IP and a disk
    if power in ("deallocating", "deallocated"):
        # launchpad never deallocates a spot VM (it deletes them), so a deallocated one was evicted
        return InstanceState.PREEMPTED if spot else InstanceState.STOPPED
    if power == "running":
        return InstanceState.RUNNING
    if power in ("stopping", "stopped"):
        return InstanceState.RUNNING  # a guest shutdown: still allocated, it bills as if running
    return InstanceState.PENDING


def root_gb(config: dict, spec: InstanceSpec) -> int:
    """The plan's disk size, at least `root_gb` from config (default DEFAULT_ROOT_GB)."""
    return max(int(spec.disk_gb or 0), int(config.get("root_gb") or DEFAULT_ROOT_GB))


def create(p, offer: Offer, spec: InstanceSpec, rank: int, base: str, tags: dict[str, str]) -> dict:
    """Create (or finish creating) the node `base`; returns the VM (a dict in ARM's shape). On a capacity
    error the node's resources are deleted again before it is raised: the next offer may be elsewhere."""
    region, acct = offer.region, p.account
    rg = acct.resource_group(region)
    net = acct.network
    subnet = acct.subnet(region)
    nsg_body = {"location": region, "tags": tags, "properties": {"securityRules": [{"name": "ssh", "properties": {
        "protocol": "Tcp", "sourcePortRange": "*", "destinationPortRange": "22", "sourceAddressPrefixes": acct.ssh_cidrs(),
        "destinationAddressPrefix": "*", "access": "Allow", "priority": 100, "direction": "Inbound"}}]}}
    nsg = call(lambda: net.network_security_groups.begin_create_or_update(rg, base + SUFFIXES["nsg"], nsg_body).result(),
               "CreateNetworkSecurityGroup", region)
    ip_config: dict[str, Any] = {"subnet": {"id": subnet}, "privateIPAllocationMethod": "Dynamic"}
    if not p.config.get("use_private_ip"):  # reached over a VPN: no public address (it would bill unused)
        ip_body = {"location": region, "tags": tags, "sku": {"name": "Standard"},
                   "properties": {"publicIPAllocationMethod": "Static", "publicIPAddressVersion": "IPv4"}}
        ip = call(lambda: net.public_ip_addresses.begin_create_or_update(rg, base + SUFFIXES["ip"], ip_body).result(),
                  "CreatePublicIPAddress", region)
        ip_config["publicIPAddress"] = {"id": ip.id}
    nic_body = {"location": region, "tags": tags, "properties": {
        "networkSecurityGroup": {"id": nsg.id}, "ipConfigurations": [{"name": "ipconfig1", "properties": ip_config}],
        "enableAcceleratedNetworking": bool(p.config.get("accelerated_networking", False))}}
    nic = call(lambda: net.network_interfaces.begin_create_or_update(rg, base + SUFFIXES["nic"], nic_body).result(),
               "CreateNetworkInterface", region)
    body = vm_body(p, offer, spec, base, tags, nic.id)
    compute = acct.compute
    try:
        vm = call(lambda: compute.virtual_machines.begin_create_or_update(rg, base, body).result(), "CreateVM", region)
    except NoCapacity:
        log.info("azure: no capacity for %s in %s; deleting %s's resources again", offer.instance_type, region, base)
        try:
            delete(p, region, base, wait=True)
        except LaunchpadError as e:  # the reaper finds what is left by tag
            log.warning("azure: could not delete %s after the failed create: %s", base, e)
        raise
    vm_dict = vm.as_dict()
    disk = vm_dict["properties"]["storageProfile"]["osDisk"]["name"]
    # ARM creates the OS disk without the VM's tags: tag it, so `instances()` finds it if it outlives the VM
    call(lambda: compute.disks.begin_update(rg, disk, {"tags": tags}).result(), "TagDisk", region)
    principal = (vm_dict.get("identity") or {}).get("principalId")
    if principal:
        acct.grant(vm_dict["id"], principal, region)
    return vm_dict


def vm_body(p, offer: Offer, spec: InstanceSpec, base: str, tags: dict[str, str], nic_id: str) -> dict[str, Any]:
    acct, cfg = p.account, p.config
    user = str(cfg.get("ssh_user") or DEFAULT_USER)
    props: dict[str, Any] = {
        "hardwareProfile": {"vmSize": offer.instance_type},
        "storageProfile": {"imageReference": acct.image_reference(), "osDisk": {
            "name": base + SUFFIXES["disk"], "createOption": "FromImage", "caching": "ReadWrite", "deleteOption": "Delete",
            "diskSizeGB": root_gb(cfg, spec), "managedDisk": {"storageAccountType": str(cfg.get("disk_type") or "Premium_LRS")}}},
        "osProfile": {"computerName": base[:64], "adminUsername": user, "linuxConfiguration": {
            "disablePasswordAuthentication": True,
            "ssh": {"publicKeys": [{"path": f"/home/{user}/.ssh/authorized_keys", "keyData": acct.public_key()}]}}},
        "networkProfile": {"networkInterfaces": [{"id": nic_id, "properties": {"primary": True, "deleteOption": "Delete"}}]},
        "diagnosticsProfile": {"bootDiagnostics": {"enabled": True}},  # managed storage: the serial log, for debugging
    }
    if offer.spot:
        props.update(priority="Spot", evictionPolicy=eviction_policy(cfg),
                     billingProfile={"maxPrice": float(cfg.get("max_price", -1))})
    return {"location": offer.region, "tags": tags, "identity": {"type": "SystemAssigned"}, "properties": props}


def eviction_policy(cfg: dict) -> str:
    policy = str(cfg.get("eviction_policy") or "Delete")
    return {"delete": "Delete", "deallocate": "Deallocate"}.get(policy.lower(), policy)


def delete(p, region: str, base: str, *, wait: bool) -> list[str]:
    """Delete the node's VM, then its NIC, public IP, NSG and OS disk (each silent if already gone), and the
    VM's role assignment. Returns what is still being deleted: the VM while ARM deletes it (then the rest
    waits for the next call), or nothing."""
    acct = p.account
    rg = acct.resource_group(region)
    compute, net = acct.compute, acct.network
    vm = call(lambda: compute.virtual_machines.get(rg, base), "GetVM", region, missing_ok=True)
    if vm is not None:
        if vm.as_dict()["properties"].get("provisioningState") != "Deleting":
            call(lambda: compute.virtual_machines.begin_delete(rg, base), "DeleteVM", region)
        # wait for it (bounded unless `wait`): the NIC cannot be deleted while the VM holds it
        deadline = time.monotonic() + (float("inf") if wait else float(p.config.get("delete_wait", 120)))
        while call(lambda: compute.virtual_machines.get(rg, base), "GetVM", region, missing_ok=True) is not None:
            if time.monotonic() > deadline:
                return [base]
            time.sleep(float(p.config.get("poll_interval") or 2))
    vm_id = f"/subscriptions/{acct.subscription()}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/{base}"
    acct.revoke(vm_id, region)
    call(lambda: net.network_interfaces.begin_delete(rg, base + SUFFIXES["nic"]).result(), "DeleteNetworkInterface", region,
         missing_ok=True)
    pollers = [call(lambda: net.public_ip_addresses.begin_delete(rg, base + SUFFIXES["ip"]), "DeletePublicIPAddress", region,
                    missing_ok=True),
               call(lambda: net.network_security_groups.begin_delete(rg, base + SUFFIXES["nsg"]), "DeleteNetworkSecurityGroup",
                    region, missing_ok=True),
               call(lambda: compute.disks.begin_delete(rg, base + SUFFIXES["disk"]), "DeleteDisk", region, missing_ok=True)]
    for poller, op in zip(pollers, ("DeletePublicIPAddress", "DeleteNetworkSecurityGroup", "DeleteDisk"), strict=True):
        if poller is not None:
            call(poller.result, op, region, missing_ok=True)
    return []


def address(p, region: str, base: str) -> tuple[str | None, str | None]:
    """(public address, private address) of the node, None where it has none (yet)."""
    rg = p.account.resource_group(region)
    net = p.account.network
    nic = call(lambda: net.network_interfaces.get(rg, base + SUFFIXES["nic"]), "GetNetworkInterface", region, missing_ok=True)
    private = None
    if nic is not None:
        configs = nic.as_dict()["properties"].get("ipConfigurations") or []
        private = ((configs[0].get("properties") or {}).get("privateIPAddress")) if configs else None
    public = None
    if not p.config.get("use_private_ip"):
        ip = call(lambda: net.public_ip_addresses.get(rg, base + SUFFIXES["ip"]), "GetPublicIPAddress", region, missing_ok=True)
        public = (ip.as_dict()["properties"].get("ipAddress") if ip is not None else None)
    return public, private
