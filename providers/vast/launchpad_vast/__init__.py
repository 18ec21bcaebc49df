"""The `vast` provider: Vast.ai marketplace GPUs (on-demand and interruptible), a container you SSH into.

Offers come live from Vast's offer search with each host's own reliability, disk and download speed and
newest CUDA (the planner scores on them), or from the bundled snapshot when the search cannot be reached.
Renting (``PUT /asks/<id>/``) starts one of the official PyTorch images, the newest whose CUDA the host's
driver runs (`launchpad.images.pick_image`; the planner already rejected hosts whose newest image is below
the recipe's ``resources.cuda``), with runtype ssh: Vast's entrypoint runs sshd with the account's SSH keys,
where `provision` registered launchpad's key once (``POST /ssh/``).

Idempotence comes from the label, never from the API alone: every instance is labelled ``launchpad job=<job>
cluster=<token> node=0``, `provision` looks for its token's instance first (and after a rent whose answer
was lost), and `instances()` lists every launchpad-labelled instance, so `down --all` and the reaper work
with the state DB gone. An offer someone else rented first is NoCapacity for that offer: the next one.

Interruptible rentals bid ``min_bid`` + `bid_margin`; a host that takes a higher bid pauses the instance
(intended running, actual stopped): `status` says PREEMPTED and the lifecycle resumes elsewhere from the last
checkpoint (Vast gives no notice, so the agent polls none). A stopped instance keeps its disk, which bills.
Checkpoints: Vast has no object store; the recipe's ``checkpoint.uri`` or config's ``checkpoint_uri``.
Host keys: launchpad's own per instance, pinned (launchpad_vast.instance).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launchpad.errors import LaunchpadError, NoCapacity, NotConfigured, NotYetTerminated, ProviderError, TransientError
from launchpad.gpuspec import canonical_gpu_name
from launchpad.images import pick_image
from launchpad.models import Capability, Instance, InstanceSpec, InstanceState, Offer, TeardownMode
from launchpad.plugins import hookimpl
from launchpad.vm import VMProvider

from .api import DEFAULT_URL, KEY_HINT, NAME, VastAPI, api_key, retry_attempts
from .instance import (
    HOST_KEY_ENV,
    HOST_KEY_PUB_ENV,
    ONSTART,
    SELF_STOP,
    env_of,
    label,
    new_host_key,
    parse_label,
    ssh_address,
    state_of,
)
from .offers import (
    DEFAULT_BID_MARGIN,
    DEFAULT_DISK_GB,
    IMAGE_PYTHON,
    best_row,
    catalog_match,
    images,
    machine_of,
    search_query,
    to_offer,
)

log = logging.getLogger("launchpad.vast")
__all__ = ["VastProvider", "label", "parse_label"]


@hookimpl
def launchpad_register_providers(register):
    register(VastProvider)


class VastProvider(VMProvider):
    name = NAME
    no_store_reason = "Vast.ai has no object store of its own"
    unsupported = {Capability.MULTI_NODE: "Vast.ai rents single machines with no network between instances "
                                          "(no multi-node NCCL)"}

    def __init__(self, config=None):
        super().__init__(config)
        self._api: VastAPI | None = None
        self._key_registered = False
        self._lock = threading.Lock()

    # -- API access ------------------------------------------------------------------------------------
    def url(self) -> str:
        return str(self.config.get("url") or DEFAULT_URL).rstrip("/")

    def api(self) -> VastAPI:
        with self._lock:
            if self._api is None:
                key = api_key(self.config)
                if not key:
                    raise NotConfigured("no Vast.ai API key", provider=NAME, hint=KEY_HINT)
                self._api = VastAPI(self.url(), key, timeout=float(self.config.get("api_timeout") or 30))
            return self._api

    def _search(self, **match: Any) -> list[dict]:
        out = self.api().call("POST", "/bundles/", body=search_query(self.config, **match))
        return [r for r in (out.get("offers") or [] if isinstance(out, Mapping) else []) if isinstance(r, dict)]

    def _list(self) -> list[dict]:
        out = self.api().call("GET", "/instances/?owner=me")
        return [i for i in (out.get("instances") or [] if isinstance(out, Mapping) else []) if isinstance(i, dict)]

    def _get(self, instance_id: str | int) -> dict | None:
        out = self.api().call("GET", f"/instances/{instance_id}/?owner=me", gone=None)
        inst = out.get("instances") if isinstance(out, Mapping) else None
        return inst if isinstance(inst, dict) and inst else None

    # -- discovery ---------------------------------------------------------------------------------------
    def check(self) -> str | None:
        import importlib.util

        for module in ("requests", "paramiko"):
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed (pip install launchpad-vast)"
        try:
            self.api().call("GET", "/users/current/")
        except TransientError as e:  # unreachable is not misconfigured: plan on the bundled snapshot (as lambda does)
            log.warning("vast: %s; the key is not checked, offers come from the bundled snapshot", e)
            return None
        except LaunchpadError as e:
            return str(e).splitlines()[0]
        except Exception as e:  # check() never raises
            return f"Vast.ai is not reachable: {e}"
        return None

    def describe(self) -> str | None:
        user = self.api().call("GET", "/users/current/") or {}
        who = user.get("email") or user.get("username") or user.get("id") or "?"
        credit = user.get("credit")
        return f"account {who}" + (f": ${float(credit):.2f} credit" if isinstance(credit, (int, float)) else "")

    def offers(self) -> list[Offer]:
        from launchpad.planner.catalog import catalog_offers

        if self.config.get("live_offers", True) is False:
            return catalog_offers(NAME)
        try:
            rows = self._search()
        except TransientError as e:
            log.warning("vast: the offer search failed (%s); planning on the bundled snapshot", e)
            return catalog_offers(NAME)
        return [o for o in (to_offer(r, self.config) for r in rows) if o is not None]

    # -- provisioning ------------------------------------------------------------------------------------
    def _by_label(self, text: str) -> dict | None:
        """The live (else stopped) instance with this label; more than one is reported as a leak."""
        found = [i for i in self._list() if str(i.get("label") or "").strip() == text
                 and state_of(i) is not InstanceState.TERMINATED]
        found.sort(key=lambda i: (state_of(i) is InstanceState.STOPPED, int(i.get("id") or 0)))
        if len(found) > 1:
            log.warning("vast: %d instances carry the label %r: %s (a leak: `launchpad down --all` removes them)",
                        len(found), text, ", ".join(str(i.get("id")) for i in found[1:]))
        return found[0] if found else None

    def key_path(self) -> Path:
        from launchpad.settings import config_dir

        return Path(self.config.get("key") or config_dir() / "ssh" / "id_ed25519").expanduser()

    def _ensure_ssh_key(self) -> None:
        """launchpad's public key on the account (Vast's entrypoint installs the account's keys in every new
        instance; it must be there before the rent). Listed first, added once."""
        if self._key_registered:
            return
        from launchpad.ssh.keys import ensure_keypair

        public = ensure_keypair(self.key_path(), comment="launchpad")
        listed = self.api().call("GET", "/ssh/")
        rows = listed if isinstance(listed, list) else (listed.get("ssh_keys") or listed.get("keys") or [])
        have = {" ".join(str(k.get("public_key") or k.get("ssh_key") or k.get("key") or "").split()[:2])
                for k in rows if isinstance(k, Mapping)}
        if " ".join(public.split()[:2]) not in have:
            self.api().call("POST", "/ssh/", body={"ssh_key": public})
        self._key_registered = True

    def _ask_for(self, offer: Offer) -> Mapping[str, Any]:
        """What the offer's machine has to rent now (a catalog offer: the best host with its GPU and count)."""
        machine = machine_of(offer)
        if machine is not None:
            rows = self._search(machine_id=machine, num_gpus=offer.gpu_count)
        else:
            rows = [r for r in self._search(**catalog_match(offer))
                    if str(offer.region).startswith(str(r.get("geolocation") or "?"))]
        row = best_row(rows)
        if row is None:
            raise NoCapacity(f"{offer.label}: nothing to rent there now (rented by someone else, or unlisted)",
                             provider=NAME, scope="offer")
        if offer.spot and not row.get("min_bid"):
            raise NoCapacity(f"{offer.label}: no interruptible rental there now", provider=NAME, scope="offer")
        return row

    def disk_gb(self, spec: InstanceSpec) -> int:
        return max(int(spec.disk_gb or 0), int(self.config.get("disk_gb") or DEFAULT_DISK_GB))

    def provision(self, offer: Offer, spec: InstanceSpec) -> Instance:
        text = label(spec.job_id, spec.token)
        found = self._by_label(text)
        if found is not None:  # this attempt's instance: made by an earlier call (or a lost answer)
            if state_of(found) is InstanceState.STOPPED:
                self.api().call("PUT", f"/instances/{found['id']}/", body={"state": "running"})
                found = self._get(found["id"]) or found
            return self._instance(found, spec, offer)
        self._ensure_ssh_key()
        row = self._ask_for(offer)
        image = pick_image(images(self.config), need=spec.cuda, host_max=row.get("cuda_max_good"), provider=NAME)
        private, public = new_host_key()
        body: dict[str, Any] = {
            "client_id": "me", "image": image.ref, "label": text, "disk": self.disk_gb(spec), "runtype": "ssh",
            "onstart": ONSTART, "env": {**(self.config.get("env") or {}), HOST_KEY_ENV: private, HOST_KEY_PUB_ENV: public},
        }
        if offer.spot:
            margin = float(self.config.get("bid_margin", DEFAULT_BID_MARGIN))
            body["price"] = round(float(row["min_bid"]) * (1 + margin), 4)
        contract = self._rent(row, body, text)
        inst = self._get(contract) or {"id": contract, "label": text, "image_uuid": image.ref,
                                       "is_bid": bool(offer.spot), "extra_env": [[HOST_KEY_PUB_ENV, public]]}
        log.info("vast: rented machine %s (offer %s) as instance %s, image %s", row.get("machine_id"), row.get("id"),
                 contract, image.ref)
        return self._instance(inst, spec, offer)

    def _rent(self, row: Mapping[str, Any], body: dict[str, Any], text: str) -> int:
        """``PUT /asks/<id>/`` once per try; a try whose answer is lost is looked up by label before the next."""
        for attempt in range(retry_attempts()):
            try:
                out = self.api().call("PUT", f"/asks/{row['id']}/", body=body, retry=False)
            except TransientError:
                found = self._by_label(text)
                if found is not None:
                    return int(found["id"])
                if attempt == retry_attempts() - 1:
                    raise
                time.sleep(min(8.0, 0.5 * 2 ** attempt))
                continue
            if isinstance(out, Mapping) and out.get("new_contract"):
                return int(out["new_contract"])
            raise ProviderError(f"PUT /asks/{row['id']}/: no new_contract in the answer ({out!r:.200})", provider=NAME)
        raise AssertionError("unreachable")  # pragma: no cover

    def _instance(self, inst: Mapping[str, Any], spec: InstanceSpec, offer: Offer | None) -> Instance:
        data = self._data(inst)
        data.update(token=spec.token, shutdown="terminate" if spec.autostop_action is TeardownMode.TERMINATE else "stop",
                    disk_gb=self.disk_gb(spec))
        return Instance(provider=NAME, id=str(inst["id"]), job_id=spec.job_id, state=state_of(inst), offer=offer,
                        address=inst.get("ssh_host") or inst.get("public_ipaddr"), created_at=time.time(), data=data)

    @staticmethod
    def _data(inst: Mapping[str, Any]) -> dict[str, Any]:
        """What an instance record says that launchpad keeps (never the env's private host key)."""
        return {"label": inst.get("label"), "spot": bool(inst.get("is_bid")), "image": inst.get("image_uuid"),
                "machine_id": inst.get("machine_id"), "host_key": env_of(inst).get(HOST_KEY_PUB_ENV),
                "region": inst.get("geolocation")}

    # -- teardown, status, discovery -------------------------------------------------------------------
    def teardown(self, instance: Instance, mode: TeardownMode = TeardownMode.TERMINATE) -> None:
        self.drop_connection(instance)
        inst = self._get(instance.id)
        if state_of(inst) is InstanceState.TERMINATED:
            return  # gone already: silent
        assert inst is not None
        if mode is TeardownMode.TERMINATE:
            self.api().call("DELETE", f"/instances/{instance.id}/", body={}, gone=None)
            if state_of(self._get(instance.id)) is not InstanceState.TERMINATED:
                raise NotYetTerminated(f"{instance.id}: destroy accepted, not done yet", provider=NAME)
            return
        if inst.get("intended_status") != "stopped":  # a stop keeps the disk, which bills while stopped
            self.api().call("PUT", f"/instances/{instance.id}/", body={"state": "stopped"}, gone=None)
            inst = self._get(instance.id)
        if inst is not None and inst.get("actual_status") not in ("stopped", "exited", None):
            raise NotYetTerminated(f"{instance.id}: stop accepted, not done yet", provider=NAME)

    def status(self, instance: Instance) -> InstanceState:
        return state_of(self._get(instance.id))

    def instances(self) -> list[Instance]:
        out: list[Instance] = []
        for inst in sorted(self._list(), key=lambda i: int(i.get("id") or 0)):
            parsed = parse_label(inst.get("label"))
            if parsed is None or state_of(inst) is InstanceState.TERMINATED:
                continue
            job_id, token, _rank = parsed
            out.append(Instance(provider=NAME, id=str(inst["id"]), job_id=job_id, state=state_of(inst),
                                offer=_offer_of(inst), address=inst.get("ssh_host") or inst.get("public_ipaddr"),
                                created_at=_num(inst.get("start_date")), data={**self._data(inst), "token": token}))
        return out

    # -- reaching an instance -----------------------------------------------------------------------------
    def remote_python(self, instance: Instance) -> str:
        return str(self.config.get("python") or IMAGE_PYTHON)

    def _known_hosts_path(self, instance_id: str) -> Path:
        from launchpad.settings import config_dir

        return config_dir() / "vast" / "known_hosts" / instance_id

    def _live(self, instance: Instance) -> dict:
        """The instance record once it runs and has an SSH address (waits while the image is pulled)."""
        deadline = time.monotonic() + float(self.config.get("boot_timeout") or 900)
        direct = bool(self.config.get("ssh_direct"))
        while True:
            inst = self._get(instance.id)
            state = state_of(inst)
            if state is InstanceState.TERMINATED:
                raise ProviderError(f"{instance.id} is gone (destroyed)", provider=NAME)
            if inst is not None and state is InstanceState.RUNNING and ssh_address(inst, direct=direct):
                return inst
            if state in (InstanceState.STOPPED, InstanceState.PREEMPTED):
                raise ProviderError(f"{instance.id} is {state.value} ({(inst or {}).get('status_msg') or 'not running'})",
                                    provider=NAME, hint=f"`launchpad resume {instance.job_id}` goes on elsewhere")
            if time.monotonic() > deadline:
                raise ProviderError(f"{instance.id} did not run with an SSH address in time "
                                    f"({(inst or {}).get('status_msg') or (inst or {}).get('actual_status')})",
                                    provider=NAME, hint="raise `boot_timeout:` (large images take minutes to pull)")
            time.sleep(2)

    def ssh_target(self, instance: Instance):
        from launchpad.ssh.target import _ssh_config, resolve_target

        inst = self._live(instance)
        address = ssh_address(inst, direct=bool(self.config.get("ssh_direct")))
        assert address is not None
        host, port = address
        cfg = _ssh_config(self.config.get("ssh_config"))
        looked = cfg.lookup(host) if cfg is not None else {}
        pin = self.config.get("host_key") or env_of(inst).get(HOST_KEY_PUB_ENV) or instance.data.get("host_key")
        return resolve_target(instance.id, host, port=port, user=self.config.get("ssh_user") or looked.get("user") or "root",
                              key_path=None, host_key=pin, ssh_config=self.config.get("ssh_config"),
                              default_key=str(self.key_path()), connect_timeout=float(self.config.get("connect_timeout") or 300))

    def transport(self, instance: Instance):
        """SSH with the instance's pinned host key (a known_hosts file per instance only if it has none: Vast's
        proxy addresses serve other instances later). Until the onstart script installed the pinned key the
        container's sshd shows the one it made at boot: that key is refused (no session is opened) and waited
        out for `host_key_wait` s, never accepted."""
        from launchpad.ssh.connection import SSHConnection
        from launchpad.ssh.hostkeys import HostKeyChanged, KnownHosts

        path = self._known_hosts_path(instance.id)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        target = self.ssh_target(instance)
        deadline = time.monotonic() + float(self.config.get("host_key_wait", 180))
        while True:
            try:
                return SSHConnection.open(target, KnownHosts(path))
            except HostKeyChanged:
                if time.monotonic() > deadline:
                    raise
                time.sleep(3)

    # -- the job on the instance -------------------------------------------------------------------------
    def job_spec_extras(self, instance: Instance) -> dict[str, Any]:
        action = str(instance.data.get("shutdown") or "stop")
        command = [self.venv_python(instance), "-c", SELF_STOP, self.url(), instance.id, action]
        # no preemption notice to poll: Vast pauses an outbid instance at once
        return {"autostop": {"command": command, "action": action}, "mount_nvme": False, "expect_nvme": False,
                "preemption": []}

    def default_checkpoint_uri(self) -> str | None:
        return str(self.config["checkpoint_uri"]) if self.config.get("checkpoint_uri") else None


def _num(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _offer_of(inst: Mapping[str, Any]) -> Offer:
    """The offer an instance found by label was rented from, as its record tells it."""
    name = str(inst.get("gpu_name") or "?")
    count = int(inst.get("num_gpus") or 0)
    price = _num(inst.get("dph_total")) or 0.0
    spot = bool(inst.get("is_bid"))
    return Offer(provider=NAME, instance_type=f"{count}x-{name.replace(' ', '_')}",
                 region=str(inst.get("geolocation") or "unknown"), zone=f"machine-{inst.get('machine_id')}",
                 gpu=canonical_gpu_name(name), gpu_count=count, gpu_memory_gb=round((_num(inst.get("gpu_ram")) or 0) / 1024, 1),
                 price_per_hour=price, spot_price_per_hour=price if spot else None, spot=spot)
