"""The `gcp` provider: Compute Engine VMs (on-demand and Spot) you SSH into, checkpoints in GCS.

Idempotence comes from names and labels, never from the API alone: a VM of attempt `token`, rank `r` is
named ``lp-<hash(token)>-<r>`` (so a repeated insert is refused as a duplicate, never run twice), the
insert carries a request id derived from the same pair, and every VM and its boot disk carry the labels
``launchpad-job``, ``launchpad-cluster`` (the attempt) and ``launchpad-node`` (the rank); the exact job id and
token are in the VM's metadata too (label values are limited to 63 lowercase characters). `provision`
first reconciles by label (a running or stopped VM of the job with the same machine type and model is
reused; extras are reported as leaks), and `instances()` lists every labelled VM of the project in one
aggregated call, so `down --all` and the reaper work with the state DB gone.

Spot VMs (``provisioningModel: SPOT``) are deleted when GCE reclaims them (``spot_termination: stop`` keeps
them, stopped); `status` reads the zone's ``compute.instances.preempted`` operations to say PREEMPTED.
A stopped VM's boot disk keeps billing (plan and status count it). The host key is read from the VM's
guest attributes (``hostkeys/``, published by the guest agent) and pinned; trusted on first use only when
the VM has none.
"""

from __future__ import annotations

import fnmatch
import hashlib
import logging
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from launchpad.errors import LaunchpadError, NotConfigured, NotYetTerminated, ProviderError, TransientError
from launchpad.models import JOB_TAG, Instance, InstanceSpec, InstanceState, Offer, TeardownMode
from launchpad.plugins import hookimpl
from launchpad.vm import VMProvider

from .api import NAME, call, client, credentials, message, wait_op
from .project import NETWORK_TAG, SELF_DELETE, Project, startup_script
from .vms import (
    created_at,
    is_spot,
    label_value,
    machine_type,
    meta,
    private_ip,
    public_ip,
    region_of,
    state_of,
    vm_name,
    wants_local_ssd,
)

log = logging.getLogger("launchpad.gcp")

CLUSTER_TAG = "launchpad-cluster"
NODE_TAG = "launchpad-node"
DEFAULT_ENDPOINT = "https://compute.googleapis.com"
# The Deep Learning VM image with PyTorch and the NVIDIA driver (its stack is reused by the job's venv).
DEFAULT_IMAGE = "projects/deeplearning-platform-release/global/images/family/pytorch-2-7-cu128-ubuntu-2204-nvidia-570"
DEFAULT_ROOT_GB = 150  # the Deep Learning VM image itself is ~50 GB
DEFAULT_USER = "launchpad"
# GPUs that N1 machines take as guest accelerators (A2, A3, A4 and G2 machine types come with theirs)
ACCELERATORS = {"T4": "nvidia-tesla-t4", "V100": "nvidia-tesla-v100", "P100": "nvidia-tesla-p100",
                "P4": "nvidia-tesla-p4", "K80": "nvidia-tesla-k80"}
_LIVE = ("PROVISIONING", "STAGING", "RUNNING", "REPAIRING")
_STOPPED = ("STOPPING", "SUSPENDING", "SUSPENDED", "TERMINATED")  # TERMINATED is GCE's "stopped"
__all__ = ["GCPProvider", "label_value", "vm_name"]
_KEY_PREFERENCE = ("ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "ssh-rsa")


@hookimpl
def launchpad_register_providers(register):
    register(GCPProvider)


class GCPProvider(VMProvider):
    name = NAME
    # unsupported: nothing (stop, spot, multi-node and local SSD are all there)

    def __init__(self, config=None):
        super().__init__(config)
        self._auth: tuple[Any, str | None] | None = None
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._zones: list[str] | None = None
        self.shared = Project(self)

    # -- API access ------------------------------------------------------------------------------------
    def credentials(self) -> Any:
        with self._lock:
            if self._auth is None:
                self._auth = credentials(self.config.get("project"))
            return self._auth[0]

    def project(self) -> str:
        self.credentials()
        assert self._auth is not None
        if not self._auth[1]:
            raise NotConfigured("no Google Cloud project", provider=NAME,
                                hint="set `project:` under providers: gcp: in config.yaml, or GOOGLE_CLOUD_PROJECT")
        return str(self._auth[1])

    def endpoint(self) -> str:
        return str(self.config.get("endpoint") or DEFAULT_ENDPOINT).rstrip("/")

    def client(self, kind: str):
        creds = self.credentials()
        with self._lock:
            if kind not in self._clients:
                self._clients[kind] = client(kind, creds, self.config.get("endpoint"))
            return self._clients[kind]

    def zones(self) -> list[str]:
        """The project's zones that are UP, narrowed by `regions:` globs (of regions) in config."""
        if self._zones is None:
            found = call(self.client("ZonesClient").list, "zones.list", project=self.project())
            pats = list(self.config.get("regions") or [])
            self._zones = sorted(z["name"] for z in found.get("items", []) if z.get("status", "UP") == "UP"
                                 and (not pats or any(fnmatch.fnmatchcase(region_of(z["name"]), p) for p in pats)))
        return self._zones

    # -- discovery ---------------------------------------------------------------------------------------
    def check(self) -> str | None:
        import importlib.util

        for module in ("google.cloud.compute_v1", "paramiko"):  # found, not imported: the SDK is slow to import
            try:
                if importlib.util.find_spec(module) is None:
                    return f"{module} is not installed (pip install launchpad-gcp)"
            except ModuleNotFoundError:
                return f"{module} is not installed (pip install launchpad-gcp)"
        try:
            self.project()
            if not self.zones():
                return f"no zone of project {self.project()} matches regions: {self.config.get('regions')} in config.yaml"
        except LaunchpadError as e:
            return str(e).splitlines()[0]
        except Exception as e:  # check() never raises
            return f"Google Cloud is not reachable: {e}"
        return None

    def describe(self) -> str | None:
        regions = sorted({region_of(z) for z in self.zones()})
        shown = ", ".join(regions[:4]) + (f" and {len(regions) - 4} more" if len(regions) > 4 else "")
        return f"project {self.project()}: {len(self.zones())} zones in {len(regions)} regions: {shown}"

    def offers(self) -> list[Offer]:
        from launchpad.planner.catalog import catalog_offers

        zones = set(self.zones())
        return [o for o in catalog_offers(NAME) if o.zone in zones]

    # -- provisioning ------------------------------------------------------------------------------------
    def _list(self, zone: str, job_id: str) -> list[dict]:
        found = call(self.client("InstancesClient").list, "instances.list", zone, request={
            "project": self.project(), "zone": zone, "filter": f'labels.{JOB_TAG} = "{label_value(job_id)}"'})
        return [i for i in found.get("items", []) if meta(i, JOB_TAG) in (job_id, None)]

    def _get(self, zone: str, name: str) -> dict | None:
        return call(self.client("InstancesClient").get, "instances.get", zone, not_found=None,
                    project=self.project(), zone=zone, instance=name)

    def _wait(self, op: dict, operation: str, zone: str, timeout: float = 600, polls: int | None = None) -> dict:
        return wait_op(self.client("ZoneOperationsClient"), op, operation, zone, timeout=timeout, polls=polls,
                       project=self.project(), zone=zone)

    def provision(self, offer: Offer, spec: InstanceSpec) -> Instance:
        zone = offer.zone
        if not zone:
            raise ProviderError(f"offer {offer.label} names no zone", provider=NAME)
        spot = bool(offer.spot)
        nodes: dict[int, dict] = {}
        leaked: list[str] = []
        found = self._list(zone, spec.job_id)
        # the same attempt first, then live before stopped: never two VMs for one rank
        found.sort(key=lambda i: (meta(i, CLUSTER_TAG) != spec.token, i.get("status") not in _LIVE))
        for inst in found:
            rank = int((inst.get("labels") or {}).get(NODE_TAG) or 0)
            same = machine_type(inst) == offer.instance_type and is_spot(inst) == spot
            if same and rank < spec.nodes and rank not in nodes:
                nodes[rank] = inst
            elif meta(inst, CLUSTER_TAG) == spec.token or same:
                leaked.append(inst["name"])
        if leaked:
            log.warning("gcp: job %s has more VMs than it asked for in %s: %s (a leak: `launchpad down %s` or "
                        "`launchpad down --all` removes them)", spec.job_id, zone, ", ".join(leaked), spec.job_id)
        for rank in sorted(nodes):
            if nodes[rank].get("status") in _STOPPED:
                nodes[rank] = self._start(zone, nodes[rank])
        missing = [r for r in range(spec.nodes) if r not in nodes]
        if missing:
            body = self._body(offer, spec)
            for rank in missing:
                nodes[rank] = self._insert(zone, body, spec, rank)
        first = nodes[0]
        nvme = bool(offer.nvme_gb) or wants_local_ssd(offer, spec)
        data = {
            "zone": zone, "region": offer.region, "spot": spot, "token": spec.token, "project": self.project(),
            "nodes": [{"rank": r, "id": nodes[r]["name"], "num": nodes[r].get("id"), "private": private_ip(nodes[r])}
                      for r in sorted(nodes)],
            "nvme": nvme,
            "shutdown": "terminate" if spec.autostop_action is TeardownMode.TERMINATE else "stop",
            "tags": {JOB_TAG: spec.job_id, CLUSTER_TAG: spec.token, **spec.tags},
            "leaked": leaked,
            "disk_gb": self._root_gb(spec) * len(nodes),  # boot disks bill while running and while stopped
        }
        return Instance(provider=NAME, id=first["name"], job_id=spec.job_id, state=state_of(first), offer=offer,
                        address=public_ip(first), created_at=time.time(), data=data)

    def _root_gb(self, spec: InstanceSpec) -> int:
        return max(int(spec.disk_gb or 0), int(self.config.get("root_gb") or DEFAULT_ROOT_GB))

    def _body(self, offer: Offer, spec: InstanceSpec) -> dict[str, Any]:
        """The instances.insert body shared by every rank (name, labels and metadata are added per rank)."""
        zone, user = offer.zone, self._user()
        disks: list[dict[str, Any]] = [{"boot": True, "autoDelete": True, "type": "PERSISTENT", "initializeParams": {
            "sourceImage": self.config.get("image") or DEFAULT_IMAGE, "diskSizeGb": str(self._root_gb(spec)),
            "diskType": f"zones/{zone}/diskTypes/{self.config.get('disk_type') or 'pd-balanced'}"}}]
        if wants_local_ssd(offer, spec):  # one 375 GB NVMe local SSD, deleted with the VM
            disks.append({"type": "SCRATCH", "autoDelete": True, "interface": "NVME",
                          "initializeParams": {"diskType": f"zones/{zone}/diskTypes/local-ssd"}})
        nic: dict[str, Any] = {"network": self.shared.network()}
        if self.config.get("subnetwork"):
            nic["subnetwork"] = self.config["subnetwork"]
        if not self.config.get("use_private_ip"):
            nic["accessConfigs"] = [{"type": "ONE_TO_ONE_NAT", "name": "External NAT"}]
        scheduling: dict[str, Any] = {"onHostMaintenance": "TERMINATE"}  # GPUs cannot live-migrate
        if offer.spot:
            action = "STOP" if str(self.config.get("spot_termination", "delete")).lower() == "stop" else "DELETE"
            scheduling.update(provisioningModel="SPOT", instanceTerminationAction=action, automaticRestart=False)
        else:
            scheduling.update(provisioningModel="STANDARD", automaticRestart=True)
        body: dict[str, Any] = {
            "machineType": f"zones/{zone}/machineTypes/{offer.instance_type}",
            "disks": disks, "networkInterfaces": [nic], "scheduling": scheduling,
            "tags": {"items": [NETWORK_TAG, self.shared.ssh_tag()]},
            "metadata": {"items": [
                {"key": "ssh-keys", "value": self.shared.ssh_keys_metadata(user)},
                {"key": "startup-script", "value": startup_script(user)},
                {"key": "enable-guest-attributes", "value": "TRUE"},  # the guest agent publishes the host keys
                {"key": "install-nvidia-driver", "value": "True"},  # Deep Learning VM images: at first boot
            ]},
            "serviceAccounts": [{"email": self.config.get("service_account") or "default", "scopes": [
                "https://www.googleapis.com/auth/devstorage.read_write",  # checkpoints
                "https://www.googleapis.com/auth/compute"]}],  # the API autostop (deletes itself)
        }
        if offer.gpu in ACCELERATORS and offer.instance_type.startswith("n1-"):
            body["guestAccelerators"] = [{"acceleratorType": f"zones/{zone}/acceleratorTypes/{ACCELERATORS[offer.gpu]}",
                                          "acceleratorCount": offer.gpu_count}]
        return body

    def _insert(self, zone: str, body: dict[str, Any], spec: InstanceSpec, rank: int) -> dict:
        name = vm_name(spec.token, rank)
        labels = {label_value(k) if re.match(r"[a-z]", k) else f"t-{label_value(k)}": label_value(v)
                  for k, v in spec.tags.items()}
        labels.update({JOB_TAG: label_value(spec.job_id), CLUSTER_TAG: label_value(spec.token), NODE_TAG: str(rank)})
        items = [*body["metadata"]["items"], {"key": JOB_TAG, "value": spec.job_id},
                 {"key": CLUSTER_TAG, "value": spec.token}]
        disks = [{**d, "initializeParams": {**d["initializeParams"], "labels": labels}} if d.get("boot") else d
                 for d in body["disks"]]
        resource = {**body, "name": name, "labels": labels, "metadata": {"items": items}, "disks": disks}
        request_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"launchpad:{spec.token}/{rank}"))
        instances = self.client("InstancesClient")
        try:
            op = call(instances.insert_unary, "instances.insert", zone, request={
                "project": self.project(), "zone": zone, "instance_resource": message("Instance", resource),
                "request_id": request_id})
            self._wait(op, "instances.insert", zone)
        except ProviderError as e:
            if "alreadyExists" not in str(e) and "already exists" not in str(e):
                raise  # a duplicate name is this very VM, made by an earlier try of this attempt
        inst = self._get(zone, name)
        if inst is None:
            raise TransientError(f"instances.insert in {zone}: {name} was created but cannot be read yet", provider=NAME)
        return inst

    def _start(self, zone: str, inst: dict) -> dict:
        """Start a stopped VM of the job (waits for a STOPPING one to finish stopping first)."""
        deadline = time.monotonic() + float(self.config.get("boot_timeout") or 600)
        while inst.get("status") in ("STOPPING", "SUSPENDING") and time.monotonic() < deadline:
            time.sleep(2)
            inst = self._get(zone, inst["name"]) or inst
        log.info("gcp: starting %s, a stopped VM of job %s", inst["name"], meta(inst, JOB_TAG))
        instances = self.client("InstancesClient")
        action = instances.resume_unary if inst.get("status") == "SUSPENDED" else instances.start_unary
        op = call(action, "instances.start", zone, project=self.project(), zone=zone, instance=inst["name"])
        self._wait(op, "instances.start", zone)
        return self._get(zone, inst["name"]) or inst

    # -- the machines of a job ----------------------------------------------------------------------------
    def nodes(self, instance: Instance) -> list[Instance]:
        out = [instance]
        for n in (instance.data.get("nodes") or [])[1:]:
            out.append(Instance(provider=NAME, id=n["id"], job_id=instance.job_id, state=instance.state,
                                offer=instance.offer, address=None, created_at=instance.created_at,
                                data={**instance.data, "node_rank": n["rank"]}))
        return out

    def _zone(self, instance: Instance) -> str:
        zone = instance.data.get("zone") or (instance.offer.zone if instance.offer else None)
        if not zone:
            raise ProviderError(f"{instance.id}: its zone is not known", provider=NAME)
        return str(zone)

    def _names(self, instance: Instance) -> list[str]:
        return [n["id"] for n in instance.data.get("nodes") or []] or [instance.id]

    def teardown(self, instance: Instance, mode: TeardownMode = TeardownMode.TERMINATE) -> None:
        zone, instances = self._zone(instance), self.client("InstancesClient")
        for node in self.nodes(instance):
            self.drop_connection(node)
        terminate = mode is TeardownMode.TERMINATE
        left: list[str] = []
        for name in self._names(instance):
            inst = self._get(zone, name)
            if inst is None or (not terminate and inst.get("status") == "TERMINATED"):
                continue
            if not terminate and inst.get("status") in ("STOPPING", "SUSPENDING", "SUSPENDED"):
                left.append(name)
                continue
            try:
                action = instances.delete_unary if terminate else instances.stop_unary
                op = call(action, f"instances.{'delete' if terminate else 'stop'}", zone, project=self.project(),
                          zone=zone, instance=name)
                self._wait(op, f"instances.{'delete' if terminate else 'stop'}", zone, timeout=150, polls=1)
            except TransientError as e:  # accepted, still going: the caller polls
                log.info("gcp: %s", e)
            except ProviderError as e:
                if "resourceNotReady" not in str(e) and "not ready" not in str(e):
                    raise  # (an instance already being deleted answers "not ready")
            inst = self._get(zone, name)
            if inst is not None and (terminate or inst.get("status") != "TERMINATED"):
                left.append(name)
        if left:
            raise NotYetTerminated(f"{', '.join(left)}: {'deletion' if terminate else 'stop'} accepted, not done yet",
                                   provider=NAME)
        if terminate:
            for name in self._names(instance):
                self._known_hosts_path(name).unlink(missing_ok=True)

    def status(self, instance: Instance) -> InstanceState:
        zone = self._zone(instance)
        states: list[InstanceState] = []
        for node in instance.data.get("nodes") or [{"id": instance.id, "num": None}]:
            inst = self._get(zone, node["id"])
            state = state_of(inst) if inst is not None else InstanceState.TERMINATED
            if instance.data.get("spot") and state in (InstanceState.STOPPED, InstanceState.TERMINATED) \
                    and self._preempted(zone, (inst or {}).get("id") or node.get("num")):
                state = InstanceState.PREEMPTED
            states.append(state)
        if InstanceState.PREEMPTED in states:
            return InstanceState.PREEMPTED
        if all(s is InstanceState.TERMINATED for s in states):
            return InstanceState.TERMINATED
        if InstanceState.TERMINATED in states:
            return InstanceState.PREEMPTED  # a node is gone under a live job: the job cannot go on there
        for s in (InstanceState.STOPPED, InstanceState.PENDING):
            if s in states:
                return s
        return InstanceState.RUNNING

    def _preempted(self, zone: str, numeric_id: Any) -> bool:
        """Did GCE reclaim the Spot VM with this id? (its zone's `compute.instances.preempted` operations)"""
        if not numeric_id:
            return False
        found = call(self.client("ZoneOperationsClient").list, "zoneOperations.list", zone, request={
            "project": self.project(), "zone": zone,
            "filter": f'(operationType = "compute.instances.preempted") AND (targetId = "{numeric_id}")'})
        return bool(found.get("items"))

    def instances(self) -> list[Instance]:
        from launchpad.planner.catalog import catalog_offers

        catalog = {(o.instance_type, o.zone): o for o in catalog_offers(NAME)}
        found = call(self.client("InstancesClient").aggregated_list, "instances.aggregatedList",
                     request={"project": self.project(), "filter": f"labels.{JOB_TAG}:*"})
        clusters: dict[tuple[str, str, str], dict[int, dict]] = {}
        for scope in (found.get("items") or {}).values():
            for inst in sorted(scope.get("instances") or [], key=lambda i: i["name"]):
                zone = inst["zone"].rsplit("/", 1)[-1]
                job = meta(inst, JOB_TAG) or inst["labels"][JOB_TAG]
                key = (zone, job, meta(inst, CLUSTER_TAG) or inst["name"])
                rank = int((inst.get("labels") or {}).get(NODE_TAG) or 0)
                if rank in clusters.setdefault(key, {}):
                    key = (zone, job, inst["name"])  # a duplicate (leaked) node: its own entry, torn down too
                    clusters.setdefault(key, {})
                clusters[key][rank] = inst
        out: list[Instance] = []
        for (zone, job_id, cluster), ranks in sorted(clusters.items()):
            first = ranks[min(ranks)]
            spot = is_spot(first)
            base = catalog.get((machine_type(first), zone)) or Offer(NAME, machine_type(first), region_of(zone), zone)
            offer = Offer.from_dict({**base.to_dict(), "spot": spot})
            out.append(Instance(
                provider=NAME, id=first["name"], job_id=job_id, state=state_of(first), offer=offer,
                address=public_ip(first), created_at=created_at(first),
                data={"zone": zone, "region": region_of(zone), "spot": spot, "token": cluster, "project": self.project(),
                      "nodes": [{"rank": r, "id": i["name"], "num": i.get("id"), "private": private_ip(i)}
                                for r, i in sorted(ranks.items())]}))
        return out

    # -- reaching a VM ----------------------------------------------------------------------------------------
    def _user(self) -> str:
        return str(self.config.get("ssh_user") or DEFAULT_USER)

    def _known_hosts_path(self, name: str) -> Path:
        from launchpad.settings import config_dir

        return config_dir() / "gcp" / "known_hosts" / name

    def transport(self, instance: Instance):
        """SSH with a known_hosts file per VM: external addresses are reused by other VMs later."""
        from launchpad.ssh.connection import SSHConnection
        from launchpad.ssh.hostkeys import KnownHosts

        path = self._known_hosts_path(instance.id)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return SSHConnection.open(self.ssh_target(instance), KnownHosts(path))

    def _live(self, instance: Instance) -> dict:
        """The VM once it runs and has an address (waits while it boots)."""
        zone = self._zone(instance)
        deadline = time.monotonic() + float(self.config.get("boot_timeout") or 600)
        while True:
            inst = self._get(zone, instance.id)
            if inst is None:
                raise ProviderError(f"{instance.id} is gone (deleted)", provider=NAME)
            address = private_ip(inst) if self.config.get("use_private_ip") else public_ip(inst)
            if inst.get("status") == "RUNNING" and address:
                return inst
            if inst.get("status") in _STOPPED:
                raise ProviderError(f"{instance.id} is {inst['status']} (stopped)", provider=NAME,
                                    hint=f"`launchpad resume {instance.job_id}` starts it again")
            if time.monotonic() > deadline:
                raise ProviderError(f"{instance.id} did not get to RUNNING with an address in time", provider=NAME)
            time.sleep(2)

    def ssh_target(self, instance: Instance):
        from launchpad.ssh.target import _ssh_config, resolve_target

        inst = self._live(instance)
        address = str(private_ip(inst) if self.config.get("use_private_ip") else public_ip(inst))
        cfg = _ssh_config(self.config.get("ssh_config"))
        looked = cfg.lookup(address) if cfg is not None else {}
        return resolve_target(instance.id, address, port=self.config.get("ssh_port"),
                              user=self.config.get("ssh_user") or looked.get("user") or DEFAULT_USER, key_path=None,
                              host_key=self._guest_host_key(instance), ssh_config=self.config.get("ssh_config"),
                              default_key=str(self.shared.key_path()),
                              connect_timeout=float(self.config.get("connect_timeout") or 300))

    def _guest_host_key(self, instance: Instance) -> str | None:
        """The host key the guest agent published in the VM's guest attributes (``hostkeys/``), or None."""
        zone = self._zone(instance)
        try:
            out = call(self.client("InstancesClient").get_guest_attributes, "instances.getGuestAttributes", zone,
                       request={"project": self.project(), "zone": zone, "instance": instance.id,
                                "query_path": "hostkeys/"})
        except LaunchpadError as e:
            log.info("gcp: no guest attributes for %s (%s): trusting its host key on first use", instance.id, e)
            return None
        keys = {i.get("key"): f"{i.get('key')} {i.get('value')}" for i in (out.get("queryValue") or {}).get("items", [])
                if i.get("namespace") == "hostkeys"}
        return next((keys[t] for t in _KEY_PREFERENCE if t in keys), None)

    # -- the job on the VM ---------------------------------------------------------------------------------
    def job_spec_extras(self, instance: Instance) -> dict[str, Any]:
        action = instance.data.get("shutdown", "stop")
        if action == "terminate":  # a guest shutdown only stops a GCE VM: delete it through the API
            command = [self.venv_python(instance), "-c", SELF_DELETE, self.endpoint(),
                       str(instance.data.get("project") or self.project()), self._zone(instance), instance.id]
        else:  # the OS halts; GCE then stops the VM (compute stops billing; the boot disk does not)
            command = [str(a) for a in (self.config.get("shutdown_command") or ["sudo", "-n", "shutdown", "-h", "now"])]
        nvme = bool(instance.data.get("nvme"))
        extras: dict[str, Any] = {"autostop": {"command": command, "action": action}, "mount_nvme": nvme,
                                  "expect_nvme": nvme, "preemption": ["gcp"] if instance.data.get("spot") else []}
        nodes = instance.data.get("nodes") or []
        if len(nodes) > 1:
            port = 29500 + int(hashlib.sha256(instance.job_id.encode()).hexdigest(), 16) % 1000
            extras.update(nodes=[{"rank": n["rank"], "address": n["private"]} for n in nodes],
                          node_rank=int(instance.data.get("node_rank") or 0), master_addr=nodes[0]["private"],
                          master_port=port)
        return extras

    def checkpoint_uri_for(self, instance: Instance) -> str | None:
        """config.yaml's `checkpoint_uri`, else launchpad's bucket in the VM's region (made once)."""
        if self.config.get("checkpoint_uri"):
            return str(self.config["checkpoint_uri"])
        region = instance.data.get("region") or region_of(self._zone(instance))
        return f"gs://{self.shared.bucket(str(region))}/checkpoints"

    def default_checkpoint_uri(self) -> str | None:
        return str(self.config["checkpoint_uri"]) if self.config.get("checkpoint_uri") else None
