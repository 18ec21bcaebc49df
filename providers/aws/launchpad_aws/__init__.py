"""The `aws` provider: EC2 instances (on-demand and spot) you SSH into, checkpoints in S3.

Idempotence comes from tags, never from the API alone: every instance, volume and network interface
carries ``launchpad-job`` (the job), ``launchpad-cluster`` (the provision token: one attempt) and
``launchpad-node`` (the rank). `provision` first reconciles by those tags (a live or stopped instance
of the job with the same type and market is reused, extras are reported as leaks) and only then calls
``RunInstances`` with a ``ClientToken`` derived from the token and the rank. `instances()` finds every
tagged instance in every enabled region, so `down --all` and the reaper work with the state DB gone.

Reaching an instance: its public address (``use_private_ip: true`` for a VPN/Direct Connect), the login
user ``ubuntu`` (the Deep Learning AMI's) unless config or ~/.ssh/config say otherwise, launchpad's own
key, and the host key printed on the instance's console (TOFU per instance when the console has none).
Sync/train/progress/logs/checkpoint come from `launchpad.vm.VMProvider`.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from launchpad.errors import AuthError, LaunchpadError, NotYetTerminated, ProviderError
from launchpad.models import JOB_TAG, Instance, InstanceSpec, InstanceState, Offer, TeardownMode
from launchpad.plugins import hookimpl
from launchpad.vm import VMProvider

from .account import Account
from .api import NAME, call, client, session
from .offers import live_offers, region_allowed

log = logging.getLogger("launchpad.aws")

CLUSTER_TAG = "launchpad-cluster"
NODE_TAG = "launchpad-node"
LIVE_STATES = ["pending", "running", "stopping", "stopped"]
_GONE = ("shutting-down", "terminated")
_SPOT_REASONS = ("Server.SpotInstanceTermination", "Server.SpotInstanceShutdown")
_HOST_KEYS = re.compile(r"-----BEGIN SSH HOST KEY KEYS-----(.*?)-----END SSH HOST KEY KEYS-----", re.S)
_KEY_PREFERENCE = ("ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512", "ssh-rsa")
DEFAULT_ROOT_GB = 100  # the Deep Learning AMI's own root snapshot is ~75 GB
# NCCL over EFA (AWS's "Get started with EFA and NCCL"): libfabric's EFA provider with GPUDirect RDMA.
EFA_ENV = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1",
           "NCCL_SOCKET_IFNAME": "^lo,docker"}
# The autostop through the API (`autostop_via: api`): the instance stops/terminates itself with its
# instance profile's credentials (argv: region, instance id, stop|terminate).
_SELF_STOP = ("import sys, boto3; c = boto3.client('ec2', region_name=sys.argv[1]); "
              "getattr(c, sys.argv[3] + '_instances')(InstanceIds=[sys.argv[2]])")


@hookimpl
def launchpad_register_providers(register):
    register(AWSProvider)


class AWSProvider(VMProvider):
    name = NAME
    # unsupported: nothing (stop, spot, multi-node and NVMe are all there)

    def __init__(self, config=None):
        super().__init__(config)
        self._session: Any = None
        self._clients: dict[tuple[str, str | None], Any] = {}
        self._lock = threading.Lock()
        self._regions: list[str] | None = None
        self.account = Account(self)

    # -- API access ------------------------------------------------------------------------------------
    def client(self, service: str, region: str | None = None):
        region = region or self.default_region()
        with self._lock:
            if self._session is None:
                self._session = session(self.config.get("profile"))
            key = (service, region)
            if key not in self._clients:
                self._clients[key] = client(self._session, service, region)
            return self._clients[key]

    def default_region(self) -> str:
        if self.config.get("region"):
            return str(self.config["region"])
        if self._session is None:
            self._session = session(self.config.get("profile"))
        return self._session.region_name or "us-east-1"

    def regions(self) -> list[str]:
        """The enabled regions (opted in, or needing no opt-in), narrowed by `regions:` globs in config."""
        if self._regions is None:
            found = call(self.client("ec2").describe_regions, "DescribeRegions", AllRegions=False)["Regions"]
            names = sorted(r["RegionName"] for r in found
                           if r.get("OptInStatus", "opt-in-not-required") in ("opt-in-not-required", "opted-in"))
            self._regions = [r for r in names if region_allowed(r, self.config.get("regions") or [])]
        return self._regions

    # -- discovery ---------------------------------------------------------------------------------------
    def check(self) -> str | None:
        try:
            import boto3  # noqa: F401
            import paramiko  # noqa: F401
        except ImportError as e:
            return f"{e.name} is not installed (pip install launchpad-aws)"
        try:
            self.client("ec2")  # makes the session
            if self._session.get_credentials() is None:  # the whole chain: env, profile, SSO, instance role
                return "no AWS credentials: run `aws configure` or `aws sso login`, or set AWS_PROFILE"
            if not self.regions():
                return f"no enabled region matches regions: {self.config.get('regions')} in config.yaml"
        except LaunchpadError as e:
            return str(e).splitlines()[0]
        except Exception as e:  # check() never raises
            return f"AWS is not reachable: {e}"
        return None

    def describe(self) -> str | None:
        regions = self.regions()
        shown = ", ".join(regions[:4]) + (f" and {len(regions) - 4} more" if len(regions) > 4 else "")
        return f"{len(regions)} regions enabled: {shown}"

    def offers(self) -> list[Offer]:
        from launchpad.planner.catalog import catalog_offers

        regions = set(self.regions())
        offers = [o for o in catalog_offers(NAME) if o.region in regions]
        if self.config.get("live_prices", True) is False:
            return offers
        return live_offers(self, offers, sorted(regions))

    # -- provisioning ------------------------------------------------------------------------------------
    def _describe(self, region: str, **kwargs: Any) -> list[dict]:
        ec2 = self.client("ec2", region)
        out: list[dict] = []
        try:
            for page in ec2.get_paginator("describe_instances").paginate(**kwargs):
                for res in page["Reservations"]:
                    out.extend(res["Instances"])
        except Exception as e:
            from .api import error_code, translate

            if error_code(e) == "InvalidInstanceID.NotFound":
                return []
            raise translate(e, "DescribeInstances", region) from None
        return out

    def _job_instances(self, region: str, job_id: str) -> list[dict]:
        return self._describe(region, Filters=[{"Name": f"tag:{JOB_TAG}", "Values": [job_id]},
                                               {"Name": "instance-state-name", "Values": LIVE_STATES}])

    def provision(self, offer: Offer, spec: InstanceSpec) -> Instance:
        region = offer.region
        found = self._job_instances(region, spec.job_id)
        spot = bool(offer.spot)
        nodes: dict[int, dict] = {}
        leaked: list[str] = []
        # the same attempt first, then live before stopped: never two instances for one rank
        found.sort(key=lambda i: (_tag(i, CLUSTER_TAG) != spec.token, i["State"]["Name"] not in ("pending", "running")))
        for inst in found:
            rank = int(_tag(inst, NODE_TAG) or 0)
            same = inst["InstanceType"] == offer.instance_type and (inst.get("InstanceLifecycle") == "spot") == spot
            if same and rank < spec.nodes and rank not in nodes:
                nodes[rank] = inst
            elif _tag(inst, CLUSTER_TAG) == spec.token or same:
                leaked.append(inst["InstanceId"])
        if leaked:
            log.warning("aws: job %s has more instances than it asked for in %s: %s (a leak: `launchpad down "
                        "%s` or `launchpad down --all` removes them)", spec.job_id, region, ", ".join(leaked), spec.job_id)
        for rank in sorted(nodes):
            if nodes[rank]["State"]["Name"] in ("stopping", "stopped"):
                nodes[rank] = self._start(region, nodes[rank])
        missing = [r for r in range(spec.nodes) if r not in nodes]
        if missing:
            launch = self._launch_args(offer, spec)
            for rank in missing:
                nodes[rank] = self._run(region, launch, spec, rank)
        for inst in nodes.values():
            self._tag_attachments(region, inst, spec)
        first = nodes[0]
        zone = (first.get("Placement") or {}).get("AvailabilityZone")
        data = {
            "region": region, "zone": zone, "spot": spot, "token": spec.token,
            "nodes": [{"rank": r, "id": nodes[r]["InstanceId"], "private": nodes[r].get("PrivateIpAddress")}
                      for r in sorted(nodes)],
            "efa": _efa(offer, spec),
            "shutdown": "terminate" if spot or spec.autostop_action is TeardownMode.TERMINATE else "stop",
            "tags": {JOB_TAG: spec.job_id, CLUSTER_TAG: spec.token, **spec.tags},
            "leaked": leaked,
            # every node's root volume (GB, all nodes together): `status` bills it while running or stopped
            "disk_gb": self._root_gb(spec) * len(nodes),
        }
        return Instance(provider=NAME, id=first["InstanceId"], job_id=spec.job_id, state=_state(first), offer=offer,
                        address=first.get("PublicIpAddress"), created_at=time.time(), data=data)

    def _launch_args(self, offer: Offer, spec: InstanceSpec) -> dict[str, Any]:
        region, acct = offer.region, self.account
        image = acct.image(region)
        subnet = acct.subnet(region, offer.zone)
        group = acct.security_group(region)
        efa = _efa(offer, spec)
        nic: dict[str, Any] = {"DeviceIndex": 0, "Groups": [group], "DeleteOnTermination": True,
                               "AssociatePublicIpAddress": not self.config.get("use_private_ip")}
        if subnet:
            nic["SubnetId"] = subnet
        if efa:
            nic["InterfaceType"] = "efa"
        root_gb = max(self._root_gb(spec), int(image.get("root_gb") or 0))
        args: dict[str, Any] = {
            "ImageId": image["id"], "InstanceType": offer.instance_type, "MinCount": 1, "MaxCount": 1,
            "KeyName": acct.key_pair(region), "NetworkInterfaces": [nic],
            "InstanceInitiatedShutdownBehavior": ("terminate" if offer.spot or spec.autostop_action is TeardownMode.TERMINATE
                                                  else "stop"),
            "BlockDeviceMappings": [{"DeviceName": image["root"], "Ebs": {
                "VolumeSize": root_gb, "VolumeType": "gp3", "DeleteOnTermination": True, "Encrypted": True}}],
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},  # IMDSv2 only
        }
        placement: dict[str, Any] = {}
        if offer.zone and not subnet:
            placement["AvailabilityZone"] = acct.zones(region).get(offer.zone, offer.zone)
        if spec.nodes > 1:
            placement["GroupName"] = acct.placement_group(region, spec.job_id)
        if placement:
            args["Placement"] = placement
        if offer.spot:  # one-time: a reclaimed instance is gone, and the job resumes elsewhere
            args["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
                "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
        profile = acct.instance_profile()
        if profile:
            args["IamInstanceProfile"] = {"Name": profile}
        return args

    def _root_gb(self, spec: InstanceSpec) -> int:
        """The plan's disk size, at least `root_gb` from config (default: DEFAULT_ROOT_GB)."""
        return max(int(spec.disk_gb or 0), int(self.config.get("root_gb") or DEFAULT_ROOT_GB))

    def _run(self, region: str, launch: dict[str, Any], spec: InstanceSpec, rank: int) -> dict:
        tags = [{"Key": k, "Value": v} for k, v in {**spec.tags, JOB_TAG: spec.job_id, CLUSTER_TAG: spec.token,
                                                     NODE_TAG: str(rank), "Name": f"launchpad-{spec.job_id}-{rank}"}.items()]
        args = {**launch, "ClientToken": hashlib.sha256(f"{spec.token}/{rank}".encode()).hexdigest()[:64],
                "TagSpecifications": [{"ResourceType": t, "Tags": tags} for t in ("instance", "volume", "network-interface")]}
        ec2 = self.client("ec2", region)
        for attempt in range(8):
            try:
                return call(ec2.run_instances, "RunInstances", region, **args)["Instances"][0]
            except ProviderError as e:
                # a just-created instance profile takes a few seconds to be usable by EC2 (IAM is eventually consistent)
                if "InvalidParameterValue" in str(e) and "nstance Profile" in str(e) and attempt < 7:
                    time.sleep(2 + 2 * attempt)
                    continue
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _start(self, region: str, inst: dict) -> dict:
        """Start a stopped instance of the job (waits for a `stopping` one to finish stopping first)."""
        iid = inst["InstanceId"]
        deadline = time.monotonic() + float(self.config.get("boot_timeout") or 600)
        while inst["State"]["Name"] == "stopping" and time.monotonic() < deadline:
            time.sleep(2)
            inst = (self._describe(region, InstanceIds=[iid]) or [inst])[0]
        log.info("aws: starting %s, a stopped instance of job %s", iid, _tag(inst, JOB_TAG))
        call(self.client("ec2", region).start_instances, "StartInstances", region, InstanceIds=[iid])
        return (self._describe(region, InstanceIds=[iid]) or [inst])[0]

    def _tag_attachments(self, region: str, inst: dict, spec: InstanceSpec) -> None:
        """Tag the instance's volumes and network interfaces too (TagSpecifications at launch should have;
        this makes sure, e.g. for a reused instance), so that nothing billable is ever unnamed."""
        ids = [b["Ebs"]["VolumeId"] for b in inst.get("BlockDeviceMappings") or [] if b.get("Ebs", {}).get("VolumeId")]
        ids += [n["NetworkInterfaceId"] for n in inst.get("NetworkInterfaces") or [] if n.get("NetworkInterfaceId")]
        if ids:
            tags = [{"Key": JOB_TAG, "Value": spec.job_id}, {"Key": CLUSTER_TAG, "Value": _tag(inst, CLUSTER_TAG) or spec.token},
                    {"Key": NODE_TAG, "Value": _tag(inst, NODE_TAG) or "0"}]
            call(self.client("ec2", region).create_tags, "CreateTags", region, Resources=ids, Tags=tags)

    # -- the machines of a job ----------------------------------------------------------------------------
    def _node_ids(self, instance: Instance) -> list[str]:
        return [n["id"] for n in instance.data.get("nodes") or []] or [instance.id]

    def nodes(self, instance: Instance) -> list[Instance]:
        out = [instance]
        for n in (instance.data.get("nodes") or [])[1:]:
            out.append(Instance(provider=NAME, id=n["id"], job_id=instance.job_id, state=instance.state,
                                offer=instance.offer, address=None, created_at=instance.created_at,
                                data={**instance.data, "node_rank": n["rank"]}))
        return out

    def teardown(self, instance: Instance, mode: TeardownMode = TeardownMode.TERMINATE) -> None:
        region = instance.data.get("region") or (instance.offer.region if instance.offer else self.default_region())
        ids = self._node_ids(instance)
        for node in self.nodes(instance):
            self.drop_connection(node)
        found = self._describe(region, InstanceIds=ids)
        terminate = mode is TeardownMode.TERMINATE or bool(instance.data.get("spot"))  # a spot instance cannot stop
        done = _GONE if terminate else (*_GONE, "stopping", "stopped")
        todo = [i["InstanceId"] for i in found if i["State"]["Name"] not in done]
        if todo:
            ec2 = self.client("ec2", region)
            if terminate:
                call(ec2.terminate_instances, "TerminateInstances", region, InstanceIds=todo)
            else:
                call(ec2.stop_instances, "StopInstances", region, InstanceIds=todo)
            found = self._describe(region, InstanceIds=ids)
        left = [i["InstanceId"] for i in found if i["State"]["Name"] not in done]
        if left:
            raise NotYetTerminated(f"{', '.join(left)}: {'termination' if terminate else 'stop'} accepted, not done yet",
                                   provider=NAME)
        if terminate:  # billing stops at shutting-down; nothing of the job is left to reuse
            for iid in ids:
                self._known_hosts_path(iid).unlink(missing_ok=True)
            if len(ids) > 1:
                try:
                    self.account.delete_placement_group(region, instance.job_id)
                except LaunchpadError as e:  # still in use while the nodes finish terminating: harmless, free
                    log.info("aws: placement group of %s not deleted yet: %s", instance.job_id, e)

    def status(self, instance: Instance) -> InstanceState:
        region = instance.data.get("region") or (instance.offer.region if instance.offer else self.default_region())
        ids = self._node_ids(instance)
        found = {i["InstanceId"]: i for i in self._describe(region, InstanceIds=ids)}
        states = [_state(found[i]) if i in found else InstanceState.TERMINATED for i in ids]
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

    def instances(self) -> list[Instance]:
        from launchpad.planner.catalog import catalog_offers

        catalog = {(o.instance_type, o.region): o for o in catalog_offers(NAME)}

        def region_instances(region: str) -> list[dict]:
            return self._describe(region, Filters=[{"Name": "tag-key", "Values": [JOB_TAG]},
                                                   {"Name": "instance-state-name", "Values": LIVE_STATES}])

        regions = self.regions()
        with ThreadPoolExecutor(max_workers=min(16, max(1, len(regions)))) as pool:
            per_region = list(pool.map(region_instances, regions))
        out: list[Instance] = []
        for region, found in zip(regions, per_region, strict=True):
            clusters: dict[tuple[str, str], dict[int, dict]] = {}
            for inst in sorted(found, key=lambda i: i["InstanceId"]):
                key = (_tag(inst, JOB_TAG) or "", _tag(inst, CLUSTER_TAG) or inst["InstanceId"])
                rank = int(_tag(inst, NODE_TAG) or 0)
                if rank in clusters.setdefault(key, {}):
                    key = (key[0], inst["InstanceId"])  # a duplicate (leaked) node: its own entry, torn down too
                    clusters.setdefault(key, {})
                clusters[key][rank] = inst
            for (job_id, cluster), ranks in clusters.items():
                first = ranks[min(ranks)]
                spot = first.get("InstanceLifecycle") == "spot"
                base = catalog.get((first["InstanceType"], region)) or Offer(NAME, first["InstanceType"], region)
                offer = Offer.from_dict({**base.to_dict(), "spot": spot,
                                         "zone": (first.get("Placement") or {}).get("AvailabilityZone")})
                out.append(Instance(
                    provider=NAME, id=first["InstanceId"], job_id=job_id, state=_state(first), offer=offer,
                    address=first.get("PublicIpAddress"), created_at=_launched(first),
                    data={"region": region, "spot": spot, "token": cluster,
                          "nodes": [{"rank": r, "id": i["InstanceId"], "private": i.get("PrivateIpAddress")}
                                    for r, i in sorted(ranks.items())]},
                ))
        return out

    # -- reaching an instance ------------------------------------------------------------------------------
    def _known_hosts_path(self, instance_id: str) -> Path:
        from launchpad.settings import config_dir

        return config_dir() / "aws" / "known_hosts" / instance_id

    def transport(self, instance: Instance):
        """SSH with a known_hosts file per instance: EC2 reuses public addresses, so a host key
        remembered by address would wrongly alarm for the next instance that gets it."""
        from launchpad.ssh.connection import SSHConnection
        from launchpad.ssh.hostkeys import KnownHosts

        path = self._known_hosts_path(instance.id)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return SSHConnection.open(self.ssh_target(instance), KnownHosts(path))

    def _live(self, instance: Instance) -> dict:
        """The instance's description once it runs and has an address (waits while it boots)."""
        region = instance.data.get("region") or (instance.offer.region if instance.offer else self.default_region())
        deadline = time.monotonic() + float(self.config.get("boot_timeout") or 600)
        while True:
            found = self._describe(region, InstanceIds=[instance.id])
            if not found or found[0]["State"]["Name"] in _GONE:
                raise ProviderError(f"{instance.id} is gone (terminated)", provider=NAME)
            inst = found[0]
            address = inst.get("PrivateIpAddress" if self.config.get("use_private_ip") else "PublicIpAddress")
            if inst["State"]["Name"] == "running" and address:
                return inst
            if inst["State"]["Name"] in ("stopping", "stopped"):
                raise ProviderError(f"{instance.id} is {inst['State']['Name']}", provider=NAME,
                                    hint=f"`launchpad resume {instance.job_id}` starts it again")
            if time.monotonic() > deadline:
                raise ProviderError(f"{instance.id} did not get to running with an address in time", provider=NAME)
            time.sleep(2)

    def ssh_target(self, instance: Instance):
        from launchpad.ssh.target import _ssh_config, resolve_target

        inst = self._live(instance)
        address = str(inst.get("PrivateIpAddress" if self.config.get("use_private_ip") else "PublicIpAddress"))
        cfg = _ssh_config(self.config.get("ssh_config"))
        looked = cfg.lookup(address) if cfg is not None else {}
        user = self.config.get("ssh_user") or looked.get("user") or "ubuntu"
        key = str(self.account.key_path())
        return resolve_target(instance.id, address, port=self.config.get("ssh_port"), user=user, key_path=None,
                              host_key=self._console_host_key(instance), ssh_config=self.config.get("ssh_config"),
                              default_key=key, connect_timeout=float(self.config.get("connect_timeout") or 300))

    def _console_host_key(self, instance: Instance) -> str | None:
        """The host key cloud-init printed on the console (the one trustworthy channel to a new instance)."""
        region = instance.data.get("region") or (instance.offer.region if instance.offer else self.default_region())
        try:
            out = call(self.client("ec2", region).get_console_output, "GetConsoleOutput", region,
                       InstanceId=instance.id).get("Output") or ""
        except AuthError:
            raise
        except LaunchpadError as e:
            log.info("aws: no console output for %s (%s): trusting its host key on first use", instance.id, e)
            return None
        return host_key_from_console(out)

    # -- the job on the instance ----------------------------------------------------------------------------
    def job_spec_extras(self, instance: Instance) -> dict[str, Any]:
        region = instance.data.get("region")
        action = instance.data.get("shutdown", "stop")
        if self.config.get("autostop_via") == "api":
            command = [self.venv_python(instance), "-c", _SELF_STOP, str(region), instance.id, action]
        else:  # the OS halts; EC2 then stops or terminates, as InstanceInitiatedShutdownBehavior says
            command = [str(a) for a in (self.config.get("shutdown_command") or ["sudo", "-n", "shutdown", "-h", "now"])]
        nvme = bool(instance.offer and instance.offer.nvme_gb)
        extras: dict[str, Any] = {"autostop": {"command": command, "action": action}, "mount_nvme": nvme,
                                  "expect_nvme": nvme, "preemption": ["aws"] if instance.data.get("spot") else []}
        nodes = instance.data.get("nodes") or []
        if len(nodes) > 1:
            port = 29500 + int(hashlib.sha256(instance.job_id.encode()).hexdigest(), 16) % 1000
            extras.update(nodes=[{"rank": n["rank"], "address": n["private"]} for n in nodes],
                          node_rank=int(instance.data.get("node_rank") or 0), master_addr=nodes[0]["private"],
                          master_port=port)
            if instance.data.get("efa"):
                extras["env"] = dict(EFA_ENV)
        return extras

    def checkpoint_uri_for(self, instance: Instance) -> str | None:
        """config.yaml's `checkpoint_uri`, else launchpad's bucket in the instance's region (made once)."""
        if self.config.get("checkpoint_uri"):
            return str(self.config["checkpoint_uri"])
        region = instance.data.get("region") or self.default_region()
        return f"s3://{self.account.bucket(region)}/checkpoints"

    def default_checkpoint_uri(self) -> str | None:
        return str(self.config["checkpoint_uri"]) if self.config.get("checkpoint_uri") else None


def host_key_from_console(text: str) -> str | None:
    """``<type> <base64>`` of the preferred host key in cloud-init's console block, or None."""
    m = _HOST_KEYS.search(text or "")
    if not m:
        return None
    keys: dict[str, str] = {}
    for line in m.group(1).splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1].startswith("AAAA"):
            keys.setdefault(parts[0], f"{parts[0]} {parts[1]}")
    return next((keys[t] for t in _KEY_PREFERENCE if t in keys), None)


def _efa(offer: Offer, spec: InstanceSpec) -> bool:
    """EFA interfaces: only for multi-node jobs on types whose interconnect has EFA."""
    return spec.nodes > 1 and "efa" in (offer.interconnect or "")


def _tag(inst: Mapping, key: str) -> str | None:
    return next((t["Value"] for t in inst.get("Tags") or [] if t["Key"] == key), None)


def _state(inst: Mapping) -> InstanceState:
    name = inst["State"]["Name"]
    reason = (inst.get("StateReason") or {}).get("Code") or ""
    if reason in _SPOT_REASONS or (inst.get("InstanceLifecycle") == "spot" and "Spot" in reason):
        return InstanceState.PREEMPTED
    return {"pending": InstanceState.PENDING, "running": InstanceState.RUNNING, "stopping": InstanceState.STOPPED,
            "stopped": InstanceState.STOPPED, "shutting-down": InstanceState.TERMINATED,
            "terminated": InstanceState.TERMINATED}.get(name, InstanceState.UNKNOWN)


def _launched(inst: Mapping) -> float | None:
    t = inst.get("LaunchTime")
    return t.timestamp() if t is not None and hasattr(t, "timestamp") else None
