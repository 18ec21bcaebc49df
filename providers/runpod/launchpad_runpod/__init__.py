"""The `runpod` provider: RunPod GPU pods (Secure and Community Cloud, on-demand and interruptible) you SSH into.

A pod is one container on a RunPod host, from one of RunPod's official PyTorch images (launchpad_runpod.pods
IMAGES, chosen by the CUDA the recipe needs). launchpad's own public key goes in as the pod's ``PUBLIC_KEY``
variable, which the image's start script appends to root's authorized_keys: per pod, so nothing is added to
the RunPod account's SSH keys (which every later pod of the account would trust too). SSH goes to the pod's
public IP and the port RunPod maps to its port 22 (``runtime.ports``).

Idempotence and discovery come from the name (pods have no tags): attempt `token` of job `j` is the pod
``launchpad-<j>-<hash(token)>-0``; `provision` looks it up by name first (a retried deploy whose answer was
lost finds its pod), and `instances()` lists launchpad's pods by the name prefix, the exact job id and token
read from the pod's environment. Host keys: RunPod publishes none, so the first key a pod presents is
recorded in a known_hosts file of that pod alone and every later connection must match it; config
``host_key:`` pins one up front (an image with a baked-in host key, or the tests' loopback sshd).

Stopping a pod releases its GPU but keeps its volume, which bills ($0.20/GB-month stopped); interruptible
pods that RunPod reclaims are stopped by RunPod and show as PREEMPTED. Checkpoints go to an object store the
recipe (or config ``checkpoint_uri``) names: RunPod has none launchpad can use.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import time
from pathlib import Path
from typing import Any

from launchpad.errors import (
    ConfigError,
    LaunchpadError,
    NoCapacity,
    NotConfigured,
    NotYetTerminated,
    ProviderError,
    TransientError,
)
from launchpad.models import JOB_TAG, Capability, Instance, InstanceSpec, InstanceState, Offer, TeardownMode
from launchpad.plugins import hookimpl
from launchpad.vm import VMProvider

from . import api
from .api import NAME, Enum
from .pods import (
    CLUSTER_ENV,
    COMMUNITY,
    JOB_ENV,
    OFFER_ENV,
    SECURE,
    TAGS_ENV,
    choose_image,
    cloud_args,
    gpu_name,
    identity,
    is_interruptible,
    pod_env,
    pod_name,
    safe_pod_id,
    ssh_endpoint,
    state_of,
)

log = logging.getLogger("launchpad.runpod")
__all__ = ["RunPodProvider", "pod_name"]

DEFAULTS: dict[str, Any] = {"volume_gb": 50, "container_disk_gb": 30, "volume_mount_path": "/workspace",
                            "ssh_user": "root", "boot_timeout": 900,
                            "connect_timeout": 300, "clouds": [SECURE, COMMUNITY]}
_INTS = ("volume_gb", "container_disk_gb", "boot_timeout", "connect_timeout")
_GONE = (InstanceState.TERMINATED,)
_STOPPED = (InstanceState.STOPPED, InstanceState.PREEMPTED)


@hookimpl
def launchpad_register_providers(register):
    register(RunPodProvider)


class RunPodProvider(VMProvider):
    name = NAME
    no_store_reason = "RunPod has no object store launchpad can use"
    default_root = "/workspace/.launchpad"  # on the pod's volume: the venv and the job's files survive a stop
    unsupported = {
        Capability.MULTI_NODE: "launchpad runs one RunPod pod per job: pods of one job share no private network "
                               "(RunPod's Instant Clusters are not supported yet)",
        Capability.NVME: "a RunPod pod gets a container disk and a volume on its host; whether they are NVMe the API "
                         "does not say",
    }

    def __init__(self, config=None):
        super().__init__(config)
        self._me: dict[str, Any] | None = None
        self._key: tuple[str | None, str] | None = None

    # -- settings and API access ---------------------------------------------------------------------------
    def setting(self, key: str) -> Any:
        return self.config[key] if self.config.get(key) is not None else DEFAULTS.get(key)

    def validate(self) -> None:
        """Bad settings: one line naming the field and the fix, before any API call (ConfigError, exit 2)."""
        where = "config.yaml: providers.runpod"
        clouds = self.setting("clouds")
        if not isinstance(clouds, list) or not clouds or any(c not in (SECURE, COMMUNITY) for c in clouds):
            raise ConfigError(f"{where}.clouds: {clouds!r} is not a list of secure, community (e.g. [secure])")
        for key in _INTS:
            value = self.setting(key)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{where}.{key}: {value!r} is not a positive whole number (e.g. {DEFAULTS[key]})")
        url = self.config.get("api_url")
        if url is not None and not str(url).startswith(("http://", "https://")):
            raise ConfigError(f"{where}.api_url: {url!r} is not an http(s) URL (RunPod's is https://api.runpod.io)")
        uri = self.config.get("checkpoint_uri")
        if uri is not None and "://" not in str(uri):
            raise ConfigError(f"{where}.checkpoint_uri: {uri!r} is not a store URI (e.g. s3://bucket/checkpoints)")

    def key(self) -> str:
        if self._key is None:
            self._key = api.api_key(self.config)
        if not self._key[0]:
            raise NotConfigured(f"no RunPod API key (looked in {self._key[1]})", provider=NAME,
                                hint=f"set {api.KEY_ENV}, or run `runpod config` (it writes {api.CREDENTIALS_FILE})")
        return self._key[0]

    def call(self, query: str, operation: str, *, retry: bool = True) -> dict[str, Any]:
        self.validate()
        api.use_endpoint(self.config.get("api_url"))
        return api.call(self.key(), query, operation, retry=retry)

    def _pods(self) -> list[dict[str, Any]]:
        _, queries, _, _ = api.sdk()
        return list((self.call(queries.QUERY_POD, "myself.pods").get("myself") or {}).get("pods") or [])

    def _get(self, pod_id: str) -> dict[str, Any] | None:
        _, queries, _, _ = api.sdk()
        try:
            return self.call(queries.generate_pod_query(safe_pod_id(pod_id)), "pod").get("pod")
        except ProviderError as e:
            if api.is_not_found(e):
                return None
            raise

    def _find(self, name: str) -> dict[str, Any] | None:
        found = [p for p in self._pods() if p.get("name") == name]
        found.sort(key=lambda p: state_of(p) in _STOPPED)  # a live one first
        return found[0] if found else None

    # -- discovery ---------------------------------------------------------------------------------------
    def check(self) -> str | None:
        try:
            self.validate()
            for module in ("runpod", "paramiko"):  # found, not imported: `import runpod` takes ~2 s
                if importlib.util.find_spec(module) is None:
                    return f"{module} is not installed (pip install launchpad-runpod)"
            self.key()
            self._me = self.call(api.MYSELF, "myself").get("myself") or {}
        except LaunchpadError as e:
            return str(e).splitlines()[0]
        except Exception as e:  # check() never raises
            return f"RunPod is not reachable: {e}"
        return None

    def describe(self) -> str | None:
        me = self._me if self._me is not None else self.call(api.MYSELF, "myself").get("myself") or {}
        assert self._key is not None
        return f"account {me.get('id') or '?'} (API key from {self._key[1]}); clouds: {', '.join(self.setting('clouds'))}"

    def offers(self) -> list[Offer]:
        """Live GPU types and prices; the bundled snapshot (configs/catalog/runpod.csv) when RunPod cannot be
        asked (unreachable, no key). A rejected key is an AuthError: this account cannot rent anything."""
        from launchpad.planner.catalog import catalog_offers

        from .pods import offers_from

        clouds = list(self.setting("clouds"))
        try:
            return offers_from(self.call(api.GPU_TYPES, "gpuTypes").get("gpuTypes") or [], clouds)
        except (TransientError, NotConfigured) as e:
            snapshot = [o for o in catalog_offers(NAME) if _cloud_of(o.region) in clouds]
            if snapshot:
                log.warning("runpod: live GPU types unavailable (%s); using the bundled snapshot", e)
                return snapshot
            raise ProviderError(f"RunPod's GPU types cannot be read ({e}) and there is no bundled snapshot "
                                "(configs/catalog/runpod.csv)", provider=NAME,
                                hint="`launchpad catalog refresh` writes one") from None

    # -- provisioning --------------------------------------------------------------------------------------
    def _deploy_input(self, offer: Offer, spec: InstanceSpec) -> tuple[dict[str, Any], bool]:
        """The deploy mutation's input for `offer` (and whether it rents an interruptible pod)."""
        from launchpad.ssh.keys import ensure_keypair

        self.validate()
        if spec.nodes > 1:
            raise ProviderError(f"{spec.job_id}: {self.unsupported[Capability.MULTI_NODE]}", provider=NAME)
        # the recipe's CUDA need, where the plan passes it (InstanceSpec.cuda), else config `cuda:`
        need = spec.cuda or self.config.get("cuda")
        host_max = getattr(offer, "host_cuda_max", None) or self.config.get("host_cuda_max")
        image, allowed = choose_image(str(need) if need else None, str(host_max) if host_max else None,
                                      self.config.get("image"))
        placement = cloud_args(offer.region)
        fields: dict[str, Any] = {
            "name": pod_name(spec.job_id, spec.token), "imageName": image, "gpuTypeId": offer.instance_type,
            "gpuCount": max(1, offer.gpu_count), "cloudType": Enum(placement.pop("cloudType")), **placement,
            "supportPublicIp": True, "startSsh": True, "ports": "22/tcp",
            "volumeInGb": max(int(spec.disk_gb or 0), int(self.setting("volume_gb"))),
            "containerDiskInGb": int(self.setting("container_disk_gb")),
            "volumeMountPath": self.setting("volume_mount_path"),
            "minVcpuCount": int(offer.vcpus) or None, "minMemoryInGb": int(offer.memory_gb) or None,
            "allowedCudaVersions": allowed or None,
            "env": [{"key": k, "value": v} for k, v in {
                "PUBLIC_KEY": ensure_keypair(self.key_path(), comment="launchpad"),  # the image's sshd reads it
                JOB_ENV: spec.job_id, CLUSTER_ENV: spec.token, TAGS_ENV: json.dumps(dict(spec.tags), sort_keys=True),
                OFFER_ENV: json.dumps({"instance_type": offer.instance_type, "region": offer.region,
                                       "gpu_count": offer.gpu_count, "price_per_hour": offer.price_per_hour,
                                       "spot_price_per_hour": offer.spot_price_per_hour, "spot": offer.spot}),
            }.items()],
        }
        if offer.spot:
            if not offer.spot_price_per_hour:
                raise NoCapacity(f"{offer.label}: RunPod lists no interruptible price for it", provider=NAME)
            fields["bidPerGpu"] = round(offer.spot_price_per_hour / max(1, offer.gpu_count), 4)
        return fields, bool(offer.spot)

    def render(self, offer: Offer, spec: InstanceSpec) -> str | None:
        fields, spot = self._deploy_input(offer, spec)
        return f"# {'podRentInterruptable' if spot else 'podFindAndDeployOnDemand'} input\n" + \
            json.dumps(fields, indent=2)

    def provision(self, offer: Offer, spec: InstanceSpec) -> Instance:
        fields, spot = self._deploy_input(offer, spec)  # bad settings, no fitting image: before any API call
        name = fields["name"]
        pod = self._find(name)
        if pod is None:
            pod = self._deploy(fields, spot)
        elif state_of(pod) in _STOPPED:
            self._resume(pod, offer)
            pod = self._get(str(pod["id"])) or pod
        data = {"name": name, "token": spec.token, "spot": spot, "region": offer.region, "image": fields["imageName"],
                "gpu_count": fields["gpuCount"], "disk_gb": fields["volumeInGb"],  # the volume bills, also stopped
                "shutdown": "terminate" if spec.autostop_action is TeardownMode.TERMINATE else "stop",
                "tags": {JOB_TAG: spec.job_id, **spec.tags}}
        endpoint = ssh_endpoint(pod)
        return Instance(provider=NAME, id=str(pod["id"]), job_id=spec.job_id, state=state_of(pod), offer=offer,
                        address=endpoint[0] if endpoint else None, created_at=time.time(), data=data)

    def _deploy(self, fields: dict[str, Any], spot: bool) -> dict[str, Any]:
        """Rent the pod. Never sent twice blindly: after a failure that may have created it, look it up by name."""
        op = "podRentInterruptable" if spot else "podFindAndDeployOnDemand"
        mutation = api.deploy_mutation(fields, interruptible=spot)
        for attempt in range(1, api.retry_attempts() + 1):
            try:
                pod = self.call(mutation, op, retry=False).get(op)
                if not pod or not pod.get("id"):
                    raise NoCapacity(f"{op}: RunPod returned no pod for {fields['gpuTypeId']}", provider=NAME)
                return self._get(str(pod["id"])) or pod
            except TransientError as e:
                found = self._find(fields["name"])
                if found is not None:
                    return found  # created; only its answer was lost
                if attempt == api.retry_attempts():
                    raise
                log.warning("runpod: %s failed (%s); retry %d/%d", op, e, attempt, api.retry_attempts() - 1)
                time.sleep(min(8.0, 0.5 * 2 ** attempt))
        raise AssertionError("unreachable")  # pragma: no cover

    def _resume(self, pod: dict[str, Any], offer: Offer | None) -> None:
        """Start a stopped pod of this attempt again (on its host: NoCapacity when that host's GPUs are taken)."""
        _, _, mutations, _ = api.sdk()
        pod_id, count = safe_pod_id(str(pod["id"])), int(pod.get("gpuCount") or 1)
        if is_interruptible(pod):  # the bid the plan priced, else what the pod cost before
            price = (offer.spot_price_per_hour if offer else None) or float(pod.get("costPerHr") or 0)
            self.call(api.bid_resume_mutation(pod_id, price / count, count), "podBidResume")
        else:
            self.call(mutations.generate_pod_resume_mutation(pod_id, count), "podResume")
        log.info("runpod: started %s (%s) again", pod_id, pod.get("name"))

    # -- the pods of launchpad -----------------------------------------------------------------------------
    def teardown(self, instance: Instance, mode: TeardownMode = TeardownMode.TERMINATE) -> None:
        _, _, mutations, _ = api.sdk()
        self.drop_connection(instance)
        terminate = mode is TeardownMode.TERMINATE
        pod = self._get(instance.id)
        state = state_of(pod)
        if state in _GONE or (not terminate and state in _STOPPED):
            if terminate:
                self._known_hosts_path(instance.id).unlink(missing_ok=True)
            return
        pod_id = safe_pod_id(instance.id)
        try:
            if terminate:
                self.call(mutations.generate_pod_terminate_mutation(pod_id), "podTerminate")
            else:
                self.call(mutations.generate_pod_stop_mutation(pod_id), "podStop")
        except ProviderError as e:
            if not api.is_not_found(e):
                raise
        after = state_of(self._get(instance.id))
        if (terminate and after not in _GONE) or (not terminate and after not in (*_STOPPED, *_GONE)):
            raise NotYetTerminated(f"{instance.id}: {'terminate' if terminate else 'stop'} accepted, not done yet",
                                   provider=NAME)
        if terminate:
            self._known_hosts_path(instance.id).unlink(missing_ok=True)

    def status(self, instance: Instance) -> InstanceState:
        return state_of(self._get(instance.id))

    def instances(self) -> list[Instance]:
        out = []
        for pod in sorted(self._pods(), key=lambda p: str(p.get("name"))):
            ident = identity(pod)
            if ident is None or state_of(pod) in _GONE:
                continue
            job_id, token, tags = ident
            try:
                facts = json.loads(pod_env(pod).get(OFFER_ENV) or "{}")
            except ValueError:
                facts = {}
            itype = str(facts.get("instance_type") or (pod.get("machine") or {}).get("gpuDisplayName") or "unknown")
            offer = Offer.from_dict({"provider": NAME, "region": "unknown", "price_per_hour": pod.get("costPerHr") or 0,
                                     **facts, "instance_type": itype, "gpu": gpu_name(itype),
                                     "gpu_count": int(pod.get("gpuCount") or facts.get("gpu_count") or 0),
                                     "spot": is_interruptible(pod)})
            endpoint = ssh_endpoint(pod)
            out.append(Instance(provider=NAME, id=str(pod["id"]), job_id=job_id, state=state_of(pod), offer=offer,
                                address=endpoint[0] if endpoint else None, created_at=None,
                                data={"name": pod.get("name"), "token": token, "spot": is_interruptible(pod),
                                      "region": offer.region, "disk_gb": int(pod.get("volumeInGb") or 0),
                                      "gpu_count": offer.gpu_count, "tags": tags}))
        return out

    # -- reaching a pod ------------------------------------------------------------------------------------
    def key_path(self) -> Path:
        from launchpad.settings import config_dir

        return Path(self.config.get("key") or config_dir() / "ssh" / "id_ed25519").expanduser()

    def _known_hosts_path(self, pod_id: str) -> Path:
        from launchpad.settings import config_dir

        return config_dir() / "runpod" / "known_hosts" / pod_id

    def transport(self, instance: Instance):
        """SSH with a known_hosts file per pod: a pod's public IP and port are handed to other pods later."""
        from launchpad.ssh.connection import SSHConnection
        from launchpad.ssh.hostkeys import KnownHosts

        path = self._known_hosts_path(instance.id)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return SSHConnection.open(self.ssh_target(instance), KnownHosts(path))

    def _running(self, instance: Instance) -> dict[str, Any]:
        """The pod once it runs with its SSH port mapped (waits while the image is pulled and it starts)."""
        deadline, delay = time.monotonic() + float(self.setting("boot_timeout")), 0.5
        while True:
            pod = self._get(instance.id)
            state = state_of(pod)
            if state is InstanceState.RUNNING and pod is not None:
                return pod
            if state in _GONE:
                raise ProviderError(f"{instance.id} is gone (terminated)", provider=NAME)
            if state in _STOPPED:
                what = "reclaimed by RunPod (interruptible)" if state is InstanceState.PREEMPTED else "stopped"
                raise ProviderError(f"{instance.id} is {what}", provider=NAME,
                                    hint=f"`launchpad resume {instance.job_id}` continues on a new pod")
            if time.monotonic() > deadline:
                raise ProviderError(f"{instance.id} did not start with its SSH port mapped within "
                                    f"{self.setting('boot_timeout')} s", provider=NAME,
                                    hint="raise providers.runpod.boot_timeout (large images take minutes to pull)")
            time.sleep(delay)
            delay = min(5.0, delay * 2)

    def ssh_target(self, instance: Instance):
        from launchpad.ssh.target import resolve_target

        endpoint = ssh_endpoint(self._running(instance))
        assert endpoint is not None
        return resolve_target(instance.id, endpoint[0], port=endpoint[1], user=str(self.setting("ssh_user")),
                              key_path=None, host_key=self.config.get("host_key"),
                              ssh_config=self.config.get("ssh_config"), default_key=str(self.key_path()),
                              connect_timeout=float(self.setting("connect_timeout")))

    # -- the job on the pod --------------------------------------------------------------------------------
    def job_spec_extras(self, instance: Instance) -> dict[str, Any]:
        """The idle watchdog stops (or removes) its own pod through RunPod's API: a container cannot halt its
        host. runpodctl comes with RunPod's images, with a pod-scoped key in /etc/rp_environment."""
        action = instance.data.get("shutdown", "stop")
        command = self.config.get("shutdown_command") or [
            "sh", "-c", '. /etc/rp_environment 2>/dev/null; exec runpodctl "$1" pod "$2"', "sh",
            "remove" if action == "terminate" else "stop", safe_pod_id(instance.id)]
        return {"autostop": {"command": [str(a) for a in command], "action": action}, "mount_nvme": False,
                "expect_nvme": False, "preemption": []}  # RunPod gives no notice before reclaiming a pod

    def default_checkpoint_uri(self) -> str | None:
        return str(self.config["checkpoint_uri"]) if self.config.get("checkpoint_uri") else None


def _cloud_of(region: str) -> str:
    return str(cloud_args(region)["cloudType"]).lower()
