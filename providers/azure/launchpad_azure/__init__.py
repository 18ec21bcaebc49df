"""The `azure` provider: Azure VMs (regular and Spot) you SSH into, checkpoints in Azure Blob (az://).

Idempotence comes from names and tags. Each node is a VM plus its NIC, public IP, NSG and OS disk, named
from the attempt's token and the node's rank (launchpad_azure.nodes) and tagged ``launchpad-job``,
``launchpad-cluster`` (the token) and ``launchpad-node`` (the rank), in the resource group
``launchpad-<region>``. `provision` first reconciles by tag (a live or deallocated VM of the job with the
same size and priority is reused, extras are reported as leaks), then PUTs the missing nodes: ARM's PUT
is create-or-update, so a repeat is harmless. `instances()` lists every tagged VM, NIC, IP, NSG and disk of
the configured regions, so leftovers of a crash between two creates are found and torn down too.

Stop means deallocate through the API (a guest shutdown leaves an Azure VM allocated and billing); a Spot VM
is deleted instead, and one found deallocated (evictionPolicy Deallocate) or deleted with its NIC left
(evictionPolicy Delete) was evicted: PREEMPTED. Reaching a VM: its public address (``use_private_ip: true``
for a VPN), the login user ``azureuser`` unless config or ~/.ssh/config say otherwise, launchpad's own key,
the host key trusted on first use per VM. Sync/train/progress/logs/checkpoint come from `VMProvider`.
"""

from __future__ import annotations

import datetime as dt
import fnmatch
import hashlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

from launchpad.errors import ConfigError, LaunchpadError, NotYetTerminated, ProviderError
from launchpad.models import JOB_TAG, Instance, InstanceSpec, InstanceState, Offer, TeardownMode
from launchpad.plugins import hookimpl
from launchpad.vm import VMProvider

from . import nodes as node
from .account import Account, rg_name
from .api import NAME, SCOPE, call

log = logging.getLogger("launchpad.azure")

CLUSTER_TAG = "launchpad-cluster"
NODE_TAG = "launchpad-node"
_LIVE = (InstanceState.RUNNING, InstanceState.PENDING)


@hookimpl
def launchpad_register_providers(register):
    register(AzureProvider)


class AzureProvider(VMProvider):
    name = NAME
    # unsupported: nothing (deallocate, Spot, multi-node over the VNet; InfiniBand is not set up: see README)

    def __init__(self, config=None):
        super().__init__(config)
        self.account = Account(self)
        self._regions: list[str] | None = None

    def regions(self) -> list[str]:
        """The catalog's regions, narrowed by `regions:` globs in config."""
        if self._regions is None:
            from launchpad.planner.catalog import catalog_offers

            pats = list(self.config.get("regions") or [])
            names = sorted({o.region for o in catalog_offers(NAME)})
            self._regions = [r for r in names if not pats or any(fnmatch.fnmatchcase(r, p) for p in pats)]
        return self._regions

    # -- discovery -----------------------------------------------------------------------------------------
    def check(self) -> str | None:
        import importlib.util

        for module in ("azure.identity", "azure.mgmt.compute", "azure.mgmt.network", "azure.mgmt.resource", "paramiko"):
            try:  # found, not imported: the SDKs are slow to import, and `plan` checks every provider
                if importlib.util.find_spec(module) is None:
                    return f"{module} is not installed (pip install launchpad-azure)"
            except ModuleNotFoundError:
                return f"{module} is not installed (pip install launchpad-azure)"
        try:
            self.account.subscription()
            call(lambda: self.account.credential().get_token(SCOPE), "GetToken")
            call(lambda: next(iter(self.account.resources.resource_groups.list()), None), "ListResourceGroups")
            if not self.regions():
                return f"no Azure region matches regions: {self.config.get('regions')} in config.yaml"
        except LaunchpadError as e:
            return str(e).splitlines()[0]
        except Exception as e:  # check() never raises
            return f"Azure is not reachable: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        return None

    def describe(self) -> str | None:
        regions = self.regions()
        shown = ", ".join(regions[:4]) + (f" and {len(regions) - 4} more" if len(regions) > 4 else "")
        store = self.config.get("checkpoint_uri") or "none (recipes must name checkpoint.uri)"
        return f"subscription {self.account.subscription()[:8]}..., {len(regions)} regions: {shown}; checkpoints: {store}"

    def offers(self) -> list[Offer]:
        from launchpad.planner.catalog import catalog_offers

        regions = set(self.regions())
        return [o for o in catalog_offers(NAME) if o.region in regions]

    # -- provisioning ----------------------------------------------------------------------------------------
    def _vms(self, region: str) -> list[dict]:
        rg = rg_name(region)
        compute = self.account.compute
        found = call(lambda: list(compute.virtual_machines.list(rg, expand="instanceView")), "ListVMs", region,
                     missing_ok=True)
        return [vm.as_dict() for vm in found or [] if JOB_TAG in (vm.tags or {})]

    def provision(self, offer: Offer, spec: InstanceSpec) -> Instance:
        region, spot = offer.region, bool(offer.spot)
        rg = self.account.resource_group(region)
        found = [vm for vm in self._vms(region) if _tag(vm, JOB_TAG) == spec.job_id]
        nodes: dict[int, dict] = {}
        leaked: list[str] = []
        # the same attempt first, then live before deallocated: never two VMs for one rank
        found.sort(key=lambda v: (_tag(v, CLUSTER_TAG) != spec.token, node.vm_state(v) not in _LIVE))
        for vm in found:
            rank, state = int(_tag(vm, NODE_TAG) or 0), node.vm_state(vm)
            props = vm["properties"]
            same = (props["hardwareProfile"]["vmSize"] == offer.instance_type and (props.get("priority") == "Spot") == spot
                    and state in (*_LIVE, InstanceState.STOPPED))
            if same and rank < spec.nodes and rank not in nodes:
                nodes[rank] = vm
            elif vm["name"] == node.base_name(spec.job_id, spec.token, rank):
                continue  # this attempt's own failed create: PUT again below (create-or-update, same name)
            elif _tag(vm, CLUSTER_TAG) == spec.token or same:
                leaked.append(vm["name"])
        if leaked:
            log.warning("azure: job %s has more VMs than it asked for in %s: %s (a leak: `launchpad down %s` or "
                        "`launchpad down --all` removes them)", spec.job_id, region, ", ".join(leaked), spec.job_id)
        for rank in sorted(nodes):
            if node.vm_state(nodes[rank]) is InstanceState.STOPPED:
                log.info("azure: starting %s, a deallocated VM of job %s", nodes[rank]["name"], spec.job_id)
                name = nodes[rank]["name"]
                poller = call(partial(self.account.compute.virtual_machines.begin_start, rg, name), "StartVM", region)
                call(poller.result, "StartVM", region)
        missing = [r for r in range(spec.nodes) if r not in nodes]

        def make(rank: int) -> dict:
            tags = {**spec.tags, JOB_TAG: spec.job_id, CLUSTER_TAG: spec.token, NODE_TAG: str(rank)}
            return node.create(self, offer, spec, rank, node.base_name(spec.job_id, spec.token, rank), tags)

        with ThreadPoolExecutor(max_workers=max(1, min(8, len(missing)))) as pool:
            for rank, vm in zip(missing, pool.map(make, missing), strict=True):
                nodes[rank] = vm
        listed = []
        for r in sorted(nodes):
            public, private = node.address(self, region, nodes[r]["name"])
            listed.append({"rank": r, "name": nodes[r]["name"], "private": private, "public": public})
        first = nodes[0]
        data = {
            "region": region, "resource_group": rg, "spot": spot, "token": spec.token, "nodes": listed,
            "eviction_policy": node.eviction_policy(self.config) if spot else None,
            "shutdown": "terminate" if spot or spec.autostop_action is TeardownMode.TERMINATE else "stop",
            "tags": {JOB_TAG: spec.job_id, CLUSTER_TAG: spec.token, **spec.tags}, "leaked": leaked,
            # every node's OS disk (GB, all nodes together): it bills while running and while deallocated
            "disk_gb": node.root_gb(self.config, spec) * len(nodes),
        }
        state = node.vm_state(first) if "instanceView" in first["properties"] else InstanceState.PENDING
        return Instance(provider=NAME, id=first["name"], job_id=spec.job_id, state=state, offer=offer,
                        address=listed[0]["public"], created_at=time.time(), data=data)

    # -- the machines of a job ---------------------------------------------------------------------------------
    def _names(self, instance: Instance) -> list[str]:
        return [n["name"] for n in instance.data.get("nodes") or []] or [instance.id]

    def _region(self, instance: Instance) -> str:
        return str(instance.data.get("region") or (instance.offer.region if instance.offer else ""))

    def nodes(self, instance: Instance) -> list[Instance]:
        out = [instance]
        for n in (instance.data.get("nodes") or [])[1:]:
            out.append(Instance(provider=NAME, id=n["name"], job_id=instance.job_id, state=instance.state,
                                offer=instance.offer, address=n.get("public"), created_at=instance.created_at,
                                data={**instance.data, "node_rank": n["rank"]}))
        return out

    def _get_vm(self, region: str, name: str) -> dict | None:
        compute = self.account.compute
        vm = call(lambda: compute.virtual_machines.get(rg_name(region), name, expand="instanceView"), "GetVM", region,
                  missing_ok=True)
        return vm.as_dict() if vm is not None else None

    def teardown(self, instance: Instance, mode: TeardownMode = TeardownMode.TERMINATE) -> None:
        region, names = self._region(instance), self._names(instance)
        for n in self.nodes(instance):
            self.drop_connection(n)
        terminate = mode is TeardownMode.TERMINATE or bool(instance.data.get("spot"))  # a spot VM is never kept
        compute, rg = self.account.compute, rg_name(region)
        vms = {name: self._get_vm(region, name) for name in names}
        if terminate:
            for name, vm in vms.items():  # all deletes first: they run in parallel on Azure's side
                if vm is not None and vm["properties"].get("provisioningState") != "Deleting":
                    call(partial(compute.virtual_machines.begin_delete, rg, name), "DeleteVM", region)
            left = [b for name in names for b in node.delete(self, region, name, wait=False)]
            if left:
                raise NotYetTerminated(f"{', '.join(left)}: deletion accepted, not done yet", provider=NAME)
            for name in names:
                self._known_hosts_path(name).unlink(missing_ok=True)
            return
        pending = []
        for name, vm in vms.items():
            state = node.vm_state(vm)
            if state in (InstanceState.STOPPED, InstanceState.TERMINATED):
                continue
            poller = call(partial(compute.virtual_machines.begin_deallocate, rg, name), "DeallocateVM", region)
            call(partial(poller.wait, float(self.config.get("delete_wait", 120))), "DeallocateVM", region)
            if node.vm_state(self._get_vm(region, name)) not in (InstanceState.STOPPED, InstanceState.TERMINATED):
                pending.append(name)
        if pending:
            raise NotYetTerminated(f"{', '.join(pending)}: deallocation accepted, not done yet", provider=NAME)

    def status(self, instance: Instance) -> InstanceState:
        region = self._region(instance)
        states = []
        for name in self._names(instance):
            vm = self._get_vm(region, name)
            if vm is None and instance.data.get("spot") and self._leftovers(region, name):
                states.append(InstanceState.PREEMPTED)  # evicted with evictionPolicy Delete: its NIC/IP/NSG stay
            else:
                states.append(node.vm_state(vm))
        if InstanceState.PREEMPTED in states:
            return InstanceState.PREEMPTED
        if all(s is InstanceState.TERMINATED for s in states):
            return InstanceState.TERMINATED
        if InstanceState.TERMINATED in states:
            return InstanceState.PREEMPTED  # a node is gone under a live job: the job cannot go on there
        for s in (InstanceState.UNKNOWN, InstanceState.STOPPED, InstanceState.PENDING):
            if s in states:
                return s
        return InstanceState.RUNNING

    def _leftovers(self, region: str, name: str) -> bool:
        net = self.account.network
        return call(lambda: net.network_interfaces.get(rg_name(region), name + node.SUFFIXES["nic"]), "GetNetworkInterface",
                    region, missing_ok=True) is not None

    def instances(self) -> list[Instance]:
        from launchpad.planner.catalog import catalog_offers

        wanted = set(self.regions())
        groups = call(lambda: list(self.account.resources.resource_groups.list()), "ListResourceGroups")
        regions = sorted({g.location for g in groups if g.name.lower() == rg_name(g.location).lower() and g.location in wanted})
        catalog = {(o.instance_type, o.region): o for o in catalog_offers(NAME)}
        with ThreadPoolExecutor(max_workers=min(16, max(1, len(regions)))) as pool:
            per_region = list(pool.map(self._tagged, regions))
        out: list[Instance] = []
        for region, (vms, parts) in zip(regions, per_region, strict=True):
            clusters: dict[tuple[str, str], dict[int, dict]] = {}
            items = [(v, True) for v in sorted(vms, key=lambda v: v["name"])]
            items += [(r, False) for r in sorted(parts, key=lambda r: r["name"])]
            for item, is_vm in items:
                base = item["name"] if is_vm else node.base_of(item["name"])
                key = (_tag(item, JOB_TAG) or "", _tag(item, CLUSTER_TAG) or base)
                rank = int(_tag(item, NODE_TAG) or 0)
                ranks = clusters.setdefault(key, {})
                if rank in ranks and ranks[rank]["name"] != base:
                    key = (key[0], base)  # a duplicate (leaked) node: its own entry, torn down too
                    ranks = clusters.setdefault(key, {})
                entry = ranks.setdefault(rank, {"name": base, "vm": None})
                if is_vm:
                    entry["vm"] = item
            for (job_id, cluster), ranks in clusters.items():
                first = ranks[min(ranks)]
                vm = first["vm"]
                props = (vm or {}).get("properties") or {}
                spot = props.get("priority") == "Spot"
                size = (props.get("hardwareProfile") or {}).get("vmSize") or "unknown"
                base = catalog.get((size, region)) or Offer(NAME, size, region)
                offer = Offer.from_dict({**base.to_dict(), "spot": spot})
                # a set of parts without a VM (a crash between creates, an eviction) bills its IP and disk
                state = node.vm_state(vm) if vm is not None else InstanceState.UNKNOWN
                gb = sum(int((r["vm"] or {}).get("properties", {}).get("storageProfile", {}).get("osDisk", {})
                             .get("diskSizeGB") or 0) for r in ranks.values())
                out.append(Instance(
                    provider=NAME, id=first["name"], job_id=job_id, state=state, offer=offer, address=None,
                    created_at=_created(props.get("timeCreated")),
                    data={"region": region, "resource_group": rg_name(region), "spot": spot, "token": cluster,
                          "nodes": [{"rank": r, "name": e["name"], "private": None} for r, e in sorted(ranks.items())],
                          "disk_gb": gb}))
        return out

    def _tagged(self, region: str) -> tuple[list[dict], list[dict]]:
        """The job-tagged VMs and the job-tagged NICs, IPs, NSGs and disks of the region's resource group."""
        rg, net, compute = rg_name(region), self.account.network, self.account.compute
        lists = {"ListNetworkInterfaces": net.network_interfaces.list, "ListPublicIPAddresses": net.public_ip_addresses.list,
                 "ListNetworkSecurityGroups": net.network_security_groups.list, "ListDisks": compute.disks.list_by_resource_group}
        parts: list[dict] = []
        for op, fn in lists.items():
            found = call(partial(_listed, fn, rg), op, region, missing_ok=True) or []
            parts.extend(r.as_dict() for r in found if JOB_TAG in (r.tags or {}))
        return self._vms(region), parts

    # -- reaching a VM ---------------------------------------------------------------------------------------------
    def _known_hosts_path(self, name: str) -> Path:
        from launchpad.settings import config_dir

        return config_dir() / "azure" / "known_hosts" / name

    def transport(self, instance: Instance):
        """SSH with a known_hosts file per VM: Azure reuses public addresses, so a host key remembered by
        address would wrongly alarm for the next VM that gets it."""
        from launchpad.ssh.connection import SSHConnection
        from launchpad.ssh.hostkeys import KnownHosts

        path = self._known_hosts_path(instance.id)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return SSHConnection.open(self.ssh_target(instance), KnownHosts(path))

    def _live_address(self, instance: Instance) -> str:
        """The VM's address once it runs and has one (waits while it boots)."""
        region = self._region(instance)
        deadline = time.monotonic() + float(self.config.get("boot_timeout") or 900)
        while True:
            vm = self._get_vm(region, instance.id)
            state = node.vm_state(vm)
            if vm is None or state is InstanceState.TERMINATED:
                raise ProviderError(f"{instance.id} is gone (deleted)", provider=NAME)
            if state in (InstanceState.STOPPED, InstanceState.PREEMPTED):
                raise ProviderError(f"{instance.id} is deallocated", provider=NAME,
                                    hint=f"`launchpad resume {instance.job_id}` starts it again")
            public, private = node.address(self, region, instance.id)
            address = private if self.config.get("use_private_ip") else public
            if state is InstanceState.RUNNING and address:
                return address
            if time.monotonic() > deadline:
                raise ProviderError(f"{instance.id} did not get to running with an address in time", provider=NAME)
            time.sleep(2)

    def ssh_target(self, instance: Instance):
        from launchpad.ssh.target import _ssh_config, resolve_target

        address = self._live_address(instance)
        cfg = _ssh_config(self.config.get("ssh_config"))
        looked = cfg.lookup(address) if cfg is not None else {}
        user = self.config.get("ssh_user") or looked.get("user") or node.DEFAULT_USER
        return resolve_target(instance.id, address, port=self.config.get("ssh_port"), user=user, key_path=None,
                              host_key=None, ssh_config=self.config.get("ssh_config"), default_key=str(self.account.key_path()),
                              connect_timeout=float(self.config.get("connect_timeout") or 300))

    # -- the job on the VM -------------------------------------------------------------------------------------------
    def vm_id(self, instance: Instance) -> str:
        rg = instance.data.get("resource_group") or rg_name(self._region(instance))
        return f"/subscriptions/{self.account.subscription()}/resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines/" \
               f"{instance.id}"

    def job_spec_extras(self, instance: Instance) -> dict[str, Any]:
        action = instance.data.get("shutdown", "stop")
        script = resources.files(__package__).joinpath("selfstop.py").read_text(encoding="utf-8")
        command = [self.remote_python(instance), "-c", script, self.account.endpoint(), self.vm_id(instance), action]
        nvme = bool(instance.offer and instance.offer.nvme_gb)  # ND sizes: local NVMe, raw until mounted
        extras: dict[str, Any] = {"autostop": {"command": command, "action": action}, "mount_nvme": nvme,
                                  "expect_nvme": nvme,
                                  "preemption": ["azure"] if instance.data.get("spot") else []}
        listed = instance.data.get("nodes") or []
        if len(listed) > 1:
            port = 29500 + int(hashlib.sha256(instance.job_id.encode()).hexdigest(), 16) % 1000
            extras.update(nodes=[{"rank": n["rank"], "address": n["private"]} for n in listed],
                          node_rank=int(instance.data.get("node_rank") or 0), master_addr=listed[0]["private"],
                          master_port=port)
        return extras

    def checkpoint_uri_for(self, instance: Instance) -> str | None:
        uri = self.default_checkpoint_uri()
        if not uri:
            raise ConfigError("the recipe names no checkpoint.uri and providers.azure.checkpoint_uri is not set",
                              hint="set it in config.yaml, e.g. az://checkpoints@mystorageaccount/launchpad")
        return uri

    def default_checkpoint_uri(self) -> str | None:
        return str(self.config["checkpoint_uri"]) if self.config.get("checkpoint_uri") else None

    def close(self) -> None:
        super().close()
        self.account.close()


def _listed(list_fn, rg: str) -> list:
    return list(list_fn(rg))


def _tag(resource: dict, key: str) -> str | None:
    return (resource.get("tags") or {}).get(key)


def _created(value: Any) -> float | None:
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, str) and value:
        head, _, tail = value.partition(".")
        zone = tail[tail.find("+"):] if "+" in tail else ("+00:00" if value.endswith("Z") else "")
        try:
            return dt.datetime.fromisoformat(head + zone).timestamp()
        except ValueError:
            return None
    return None
