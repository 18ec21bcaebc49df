"""The `lambda` provider: Lambda Cloud on-demand instances you SSH into, over Lambda's HTTP API (v1).

What Lambda lacks, and what launchpad does about it:
- **No stop, only terminate** (`unsupported[STOP]`): a recipe that sets `autostop.action: stop` is not planned
  here (the plan says why); otherwise idle and finished instances are terminated. Checkpoints live in an
  object store, so nothing is lost with the disk.
- **No spot** (`unsupported[SPOT]`): every offer is on-demand.
- **No object store**: `checkpoint_uri:` in config (any s3://, gs:// or az:// store), or the recipe's own.
- **No labels to find instances by**: the instance name says whose it is (launchpad_lambda.offers), so
  `instances()` finds every launchpad instance by its name prefix with the state DB gone. The exact job
  id also goes in a `launchpad-job` tag, used where the API returns tags.
- **No host key from the API**: the first connection to an instance trusts its key and pins it in a
  known_hosts file of that instance alone (launchpad.ssh.hostkeys; public addresses are reused by later
  instances), removed when the instance is terminated; a changed key is refused.
- **No instance identity**: the idle watchdog can only terminate through the API with the API key. The key
  stays on this machine unless config ``self_terminate: true`` puts it on the instance (a 0600 file in the
  job's private directory); without it, `launchpad reap` (scheduled) or the client following the job
  terminates an idle instance.

`provision` registers launchpad's SSH public key once (``launchpad-<hash of the key>``), then launches one
instance per node named for the job, the attempt's token and the rank; a second call with the same token
finds them by name and launches nothing. A launch is never retried blindly: after a failure that may have
launched (5xx, a dropped connection), the instances are listed again first.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from pathlib import Path
from typing import Any

from launchpad.errors import LaunchpadError, NotConfigured, NotYetTerminated, ProviderError, TransientError
from launchpad.models import JOB_TAG, Bundle, Capability, Instance, InstanceSpec, InstanceState, Offer, TeardownMode
from launchpad.plugins import hookimpl
from launchpad.transport import CommandRunner
from launchpad.vm import VMProvider

from .api import DEFAULT_URL, KEY_ENV, KEY_FILE, KEY_HINT, NAME, ApiKey, LambdaAPI, NotFound, RequestRejected, find_key, retrying
from .offers import instance_name, job_of, job_part, live_offers, offer_of, parse_name, state_of, token_hash

log = logging.getLogger("launchpad.lambda")

__all__ = ["LambdaProvider", "instance_name", "parse_name"]
DEFAULT_USER = "ubuntu"  # Lambda Stack images
TYPES_TTL = 120.0  # seconds a listing of instance types (capacity) is reused
KEY_ON_INSTANCE = "lambda-api-key"  # in the job's work directory, only with self_terminate: true
_LIVE = ("booting", "active", "unhealthy")
_TAG_KEY_OK = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-:")

# The idle watchdog's terminate (config self_terminate: true): argv = API URL, key file, instance ids.
# Plain urllib: it runs with the venv's python but needs nothing installed.
SELF_TERMINATE = (
    "import json, sys, urllib.request as u; "
    "url, path, *ids = sys.argv[1:]; key = open(path).read().strip(); "
    "r = u.Request(url.rstrip('/') + '/instance-operations/terminate', method='POST', "
    "data=json.dumps({'instance_ids': ids}).encode(), "
    "headers={'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'}); "
    "print(u.urlopen(r, timeout=60).status)"
)


@hookimpl
def launchpad_register_providers(register):
    register(LambdaProvider)


class LambdaProvider(VMProvider):
    name = NAME
    no_store_reason = "Lambda Cloud has no object store of its own"
    unsupported = {
        Capability.STOP: "Lambda Cloud cannot stop instances, only terminate them (launchpad terminates idle and "
                         "finished ones; a resume starts a new instance from the last checkpoint)",
        Capability.SPOT: "Lambda Cloud sells no spot instances (on-demand only)",
    }

    def __init__(self, config=None):
        super().__init__(config)
        self._api: LambdaAPI | None = None
        self._types: dict[str, Any] | None = None
        self._types_at = 0.0
        self._offers_live = False  # the last offers() came from the API
        self._key_name: str | None = None
        self._lock = threading.Lock()

    # -- API access ------------------------------------------------------------------------------------
    def api_url(self) -> str:
        return str(self.config.get("api_url") or DEFAULT_URL).rstrip("/")

    @property
    def api(self) -> LambdaAPI:
        with self._lock:
            if self._api is None:
                key = find_key(self.config)
                if key is None:
                    raise NotConfigured(f"no Lambda Cloud API key (neither {KEY_ENV} nor {KEY_FILE})", provider=NAME,
                                        hint=KEY_HINT)
                self._api = LambdaAPI(self.api_url(), key, timeout=float(self.config.get("timeout") or 30))
            return self._api

    def instance_types(self, *, retry: bool = True) -> dict[str, Any]:
        """GET /instance-types, kept for TYPES_TTL s (check, describe and offers ask it once; a re-plan after a
        failure minutes later sees the capacity of then)."""
        if self._types is None or time.monotonic() - self._types_at > TYPES_TTL:
            if retry:
                types = self.api.call("GET", "/instance-types", operation="list instance types")
            else:  # check(): one quick try, it runs before every command
                types = self.api.once("GET", "/instance-types", operation="list instance types", timeout=5)
            self._types, self._types_at = types or {}, time.monotonic()
        return self._types

    # -- discovery ---------------------------------------------------------------------------------------
    def check(self) -> str | None:
        """A key is found and Lambda accepts it. An API that cannot be reached right now does not make the
        provider unusable (offers then come from the bundled catalog); a rejected key does."""
        import importlib.util

        for module in ("requests", "paramiko"):
            if importlib.util.find_spec(module) is None:
                return f"{module} is not installed (pip install launchpad-lambda)"
        try:
            self.instance_types(retry=False)
        except TransientError as e:
            log.info("lambda: %s (offers come from the bundled catalog)", e)
        except LaunchpadError as e:
            return str(e).splitlines()[0]
        except Exception as e:  # check() never raises
            return f"Lambda Cloud API failed: {e}"
        return None

    def describe(self) -> str:
        offers = self.offers()
        regions = sorted({o.region for o in offers})
        where = self.default_checkpoint_uri()
        store = f"checkpoints to {where}" if where else "no checkpoint_uri: recipes must name checkpoint.uri"
        source = "with capacity now" if self._offers_live else "from the bundled catalog: the API is not reachable"
        return (f"{len({o.instance_type for o in offers})} instance types in {len(regions)} regions {source}; "
                f"key from {self.api.key.source}; {store}")

    def offers(self) -> list[Offer]:
        """Live from GET /instance-types (types x regions with capacity now); the bundled snapshot
        (configs/catalog/lambda.csv: list prices, not capacity) when the API cannot be reached."""
        regions = [str(r) for r in self.config.get("regions") or []]
        self._offers_live = False
        if self.config.get("live_offers", True) is not False:
            try:
                offers = live_offers(self.instance_types(), regions)
                self._offers_live = True
                return offers
            except TransientError as e:
                log.warning("lambda: %s; offering the bundled catalog instead", e)
        import fnmatch

        from launchpad.planner.catalog import catalog_offers

        return [o for o in catalog_offers(NAME) if not regions or any(fnmatch.fnmatchcase(o.region, p) for p in regions)]

    # -- the SSH key launchpad logs in with --------------------------------------------------------------
    def key_path(self) -> Path:
        from launchpad.settings import config_dir

        return Path(self.config.get("key") or config_dir() / "ssh" / "id_ed25519").expanduser()

    def ssh_key_name(self) -> str:
        """Config `ssh_key_name` (a key already in the account), else launchpad's public key, registered once
        as ``launchpad-<hash>`` (GET /ssh-keys, POST when missing)."""
        if self.config.get("ssh_key_name"):
            return str(self.config["ssh_key_name"])
        if self._key_name is None:
            from launchpad.ssh.keys import ensure_keypair

            public = " ".join(ensure_keypair(self.key_path(), comment="launchpad").split()[:2])
            name = "launchpad-" + hashlib.sha256(public.encode()).hexdigest()[:12]
            listed = self.api.call("GET", "/ssh-keys", operation="list SSH keys") or []
            if not any(k.get("name") == name for k in listed):
                log.info("lambda: registering launchpad's SSH key as %s", name)
                self.api.call("POST", "/ssh-keys", body={"name": name, "public_key": public}, operation="add SSH key")
            self._key_name = name
        return self._key_name

    # -- provisioning ------------------------------------------------------------------------------------
    def _listed(self) -> list[dict[str, Any]]:
        """Every launchpad instance of the account that is not terminated, with its parsed name."""
        found = self.api.call("GET", "/instances", operation="list instances") or []
        out = []
        for inst in found:
            parsed = parse_name(inst.get("name"))
            if parsed is not None and inst.get("status") not in ("terminated", "terminating"):
                out.append({**inst, "_name": parsed})
        return out

    def _get(self, instance_id: str) -> dict[str, Any] | None:
        return self.api.call("GET", f"/instances/{instance_id}", operation=f"get instance {instance_id}", not_found=None)

    def provision(self, offer: Offer, spec: InstanceSpec) -> Instance:
        if offer.spot:
            raise ProviderError(f"{offer.label}: {self.unsupported[Capability.SPOT]}", provider=NAME)
        key_name = self.ssh_key_name()
        token = token_hash(spec.token)
        nodes: dict[int, dict[str, Any]] = {}
        leaked = []
        for inst in self._listed():
            p = inst["_name"]
            if p["job"] != job_part(spec.job_id):
                continue
            if p["token"] == token and p["rank"] < spec.nodes and p["rank"] not in nodes:
                nodes[p["rank"]] = inst
            elif p["token"] != token:
                leaked.append(inst["name"])
        if leaked:
            log.warning("lambda: job %s has instances of another attempt: %s (a leak: `launchpad down %s` or "
                        "`launchpad down --all` removes them)", spec.job_id, ", ".join(leaked), spec.job_id)
        for rank in range(spec.nodes):
            if rank not in nodes:
                nodes[rank] = self._launch_node(offer, spec, rank, key_name)
        first = nodes[0]
        data = {"region": offer.region, "token": spec.token, "shutdown": "terminate", "key_name": key_name,
                "nodes": [{"rank": r, "id": nodes[r]["id"], "name": nodes[r].get("name"),
                           "private": nodes[r].get("private_ip")} for r in sorted(nodes)],
                "tags": {JOB_TAG: spec.job_id, **spec.tags}}
        return Instance(provider=NAME, id=str(first["id"]), job_id=spec.job_id, state=state_of(first), offer=offer,
                        address=first.get("ip"), created_at=time.time(), data=data)

    def _launch_node(self, offer: Offer, spec: InstanceSpec, rank: int, key_name: str) -> dict[str, Any]:
        """Launch rank `rank`, or find it if an earlier try launched it: before every try the instances are
        listed by name, so a launch whose answer was lost (5xx, dropped connection) is not run twice."""
        token = token_hash(spec.token)
        name = instance_name(spec.job_id, spec.token, rank)
        tags = [{"key": k, "value": str(v)[:128]} for k, v in {JOB_TAG: spec.job_id, **spec.tags}.items()
                if k[:1].isalpha() and set(k) <= _TAG_KEY_OK and len(k) <= 55]
        body: dict[str, Any] = {"region_name": offer.region, "instance_type_name": offer.instance_type,
                                "ssh_key_names": [key_name], "quantity": 1, "name": name, "tags": tags}
        for key in ("file_system_names", "image", "firewall_rulesets"):
            if self.config.get(key):
                body[key] = self.config[key]
        out: dict[str, Any] | None = None
        for attempt in retrying(f"launch {offer.label}"):
            with attempt:
                for inst in self._listed():
                    p = inst["_name"]
                    if (p["job"], p["token"], p["rank"]) == (job_part(spec.job_id), token, rank):
                        return inst  # launched by an earlier try
                log.info("lambda: launching %s (%s in %s)", name, offer.instance_type, offer.region)
                try:
                    out = self.api.once("POST", "/instance-operations/launch", body=body, operation=f"launch {offer.label}")
                except NotFound as e:  # the type, the SSH key or the file system named does not exist
                    raise RequestRejected(f"Lambda Cloud refused {e.message}", provider=NAME,
                                          hint="check ssh_key_name / file_system_names in providers.lambda") from None
        ids = list((out or {}).get("instance_ids") or [])
        if not ids:
            raise TransientError(f"launch {offer.label}: Lambda answered without an instance id", provider=NAME)
        return self._get(ids[0]) or {"id": ids[0], "name": name, "status": "booting"}

    # -- the machines of a job ----------------------------------------------------------------------------
    def nodes(self, instance: Instance) -> list[Instance]:
        out = [instance]
        for n in (instance.data.get("nodes") or [])[1:]:
            out.append(Instance(provider=NAME, id=n["id"], job_id=instance.job_id, state=instance.state,
                                offer=instance.offer, address=None, created_at=instance.created_at,
                                data={**instance.data, "node_rank": n["rank"]}))
        return out

    def _ids(self, instance: Instance) -> list[str]:
        return [str(n["id"]) for n in instance.data.get("nodes") or []] or [instance.id]

    def teardown(self, instance: Instance, mode: TeardownMode = TeardownMode.TERMINATE) -> None:
        if mode is TeardownMode.STOP:
            log.warning("lambda: %s cannot be stopped, only terminated: terminating it", instance.id)
        for node in self.nodes(instance):
            self.drop_connection(node)
        live = [i for i in self._ids(instance) if (self._get(i) or {}).get("status") in _LIVE]
        if live:
            try:
                self.api.call("POST", "/instance-operations/terminate", body={"instance_ids": live},
                              operation=f"terminate {', '.join(live)}")
            except NotFound:  # gone in between: terminate them one by one, the missing one is fine
                for i in live:
                    self.api.call("POST", "/instance-operations/terminate", body={"instance_ids": [i]},
                                  operation=f"terminate {i}", not_found=None)
        left = [i for i in self._ids(instance) if (self._get(i) or {}).get("status") in (*_LIVE, "terminating")]
        if left:
            raise NotYetTerminated(f"{', '.join(left)}: termination accepted, not done yet", provider=NAME)
        for i in self._ids(instance):
            self._known_hosts_path(i).unlink(missing_ok=True)

    def status(self, instance: Instance) -> InstanceState:
        states = [state_of(self._get(i)) for i in self._ids(instance)]
        if InstanceState.PREEMPTED in states:
            return InstanceState.PREEMPTED
        if all(s is InstanceState.TERMINATED for s in states):
            return InstanceState.TERMINATED
        if InstanceState.TERMINATED in states:
            return InstanceState.PREEMPTED  # a node is gone under a live job: the job cannot go on there
        for s in (InstanceState.UNKNOWN, InstanceState.PENDING):
            if s in states:
                return s
        return InstanceState.RUNNING

    def instances(self) -> list[Instance]:
        known = {}
        try:
            known = {name: entry.get("instance_type") or {} for name, entry in self.instance_types().items()}
        except LaunchpadError as e:
            log.info("lambda: instance types not listed (%s): offers of found instances are partial", e)
        clusters: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
        for inst in sorted(self._listed(), key=lambda i: str(i.get("name"))):
            p = inst["_name"]
            key = (job_of(inst, p), p["token"])
            if p["rank"] in clusters.setdefault(key, {}):
                key = (key[0], str(inst["id"]))  # a duplicate (leaked) node: its own entry, torn down too
                clusters.setdefault(key, {})
            clusters[key][p["rank"]] = inst
        from launchpad.planner.settings import planner_settings

        gpus = list(planner_settings()["gpus"])
        out = []
        for (job_id, token), ranks in sorted(clusters.items()):
            first = ranks[min(ranks)]
            itype = {**(first.get("instance_type") or {}), **known.get(str((first.get("instance_type") or {})
                                                                            .get("name")), {})}
            region = str((first.get("region") or {}).get("name") or "")
            offer = offer_of(itype, region, gpus) if itype.get("name") else Offer(NAME, "unknown", region)
            out.append(Instance(
                provider=NAME, id=str(first["id"]), job_id=job_id, state=state_of(first), offer=offer,
                address=first.get("ip"), created_at=first["_name"]["created"],
                data={"region": region, "token": token, "shutdown": "terminate",
                      "nodes": [{"rank": r, "id": i["id"], "name": i.get("name"), "private": i.get("private_ip")}
                                for r, i in sorted(ranks.items())]}))
        return out

    # -- reaching an instance ----------------------------------------------------------------------------
    def _known_hosts_path(self, instance_id: str) -> Path:
        from launchpad.settings import config_dir

        return config_dir() / "lambda" / "known_hosts" / instance_id

    def transport(self, instance: Instance):
        """SSH with a known_hosts file per instance: Lambda reuses public addresses, so a key remembered by
        address would wrongly alarm for the next instance that gets it. First contact trusts on first use
        (the API publishes no host key) and pins the key there."""
        from launchpad.ssh.connection import SSHConnection
        from launchpad.ssh.hostkeys import KnownHosts

        path = self._known_hosts_path(instance.id)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        return SSHConnection.open(self.ssh_target(instance), KnownHosts(path))

    def _address(self, inst: dict[str, Any]) -> str | None:
        return inst.get("private_ip") if self.config.get("use_private_ip") else inst.get("ip")

    def _live(self, instance: Instance) -> dict[str, Any]:
        """The instance once it is active and has an address (polls while it boots, saying what it waits for)."""
        deadline = time.monotonic() + float(self.config.get("boot_timeout") or 900)
        every = float(self.config.get("poll_seconds") or 5)
        said = None
        while True:
            inst = self._get(instance.id)
            status = (inst or {}).get("status")
            if inst is None or status in ("terminated", "terminating", "preempted"):
                raise ProviderError(f"{instance.id} is gone ({status or 'terminated'})", provider=NAME)
            if status == "active" and self._address(inst):
                return inst
            if status != said:
                log.info("lambda: %s is %s; waiting until it is active with an address", instance.id, status)
                said = status
            if time.monotonic() > deadline:
                raise ProviderError(f"{instance.id} did not become active with an address in time (still {status})",
                                    provider=NAME, hint="raise providers.lambda.boot_timeout, or `launchpad down` it")
            time.sleep(every)

    def ssh_target(self, instance: Instance):
        from launchpad.ssh.target import _ssh_config, resolve_target

        address = str(self._address(self._live(instance)))
        cfg = _ssh_config(self.config.get("ssh_config"))
        looked = cfg.lookup(address) if cfg is not None else {}
        return resolve_target(instance.id, address, port=self.config.get("ssh_port"),
                              user=self.config.get("ssh_user") or looked.get("user") or DEFAULT_USER, key_path=None,
                              host_key=None, ssh_config=self.config.get("ssh_config"), default_key=str(self.key_path()),
                              connect_timeout=float(self.config.get("connect_timeout") or 300))

    # -- the job on the instance ---------------------------------------------------------------------------
    def job_spec_extras(self, instance: Instance) -> dict[str, Any]:
        command = None  # nothing on the instance can end its billing: `launchpad reap` or the client does
        if self.config.get("self_terminate"):
            command = [self.venv_python(instance), "-c", SELF_TERMINATE, self.api_url(),
                       f"{self.workdir(instance)}/{KEY_ON_INSTANCE}", *self._ids(instance)]
        # the root disk IS the local NVMe: nothing to mount, nothing to warn about
        extras: dict[str, Any] = {"autostop": {"command": command, "action": "terminate"}, "mount_nvme": False,
                                  "expect_nvme": False, "preemption": []}
        nodes = instance.data.get("nodes") or []
        if len(nodes) > 1:
            port = 29500 + int(hashlib.sha256(instance.job_id.encode()).hexdigest(), 16) % 1000
            extras.update(nodes=[{"rank": n["rank"], "address": n["private"]} for n in nodes],
                          node_rank=int(instance.data.get("node_rank") or 0), master_addr=nodes[0]["private"],
                          master_port=port)
        return extras

    def sync(self, instance: Instance, bundle: Bundle) -> None:
        super().sync(instance, bundle)
        if self.config.get("self_terminate"):  # the user chose it: the key goes to each node's private job dir
            key: ApiKey = self.api.key
            for node in self.nodes(instance):
                path = f"{self.workdir(node)}/{KEY_ON_INSTANCE}"

                def put(conn: CommandRunner, path: str = path) -> None:
                    conn.put_bytes(key.value.encode(), path, mode=0o600)

                self._call(node, put)

    def default_checkpoint_uri(self) -> str | None:
        return str(self.config["checkpoint_uri"]) if self.config.get("checkpoint_uri") else None
