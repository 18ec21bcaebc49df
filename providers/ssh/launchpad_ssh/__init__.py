"""The `ssh` provider: machines you already have (on-prem boxes, rented Lambda/Vast/... hosts), listed in
``hosts.yaml`` in launchpad's config dir (see launchpad_ssh.hosts for the format).

Each host is one `Offer`. "Provisioning" claims a free host: an atomic ``mkdir <root>/claim`` on the
host, with ``owner.json`` (job, token, instance) inside, so two jobs never share a host's GPUs, and
`instances()` finds claimed hosts by that lock even when the local state is gone. Teardown stops the
agent, deletes the job's directory and releases the claim; all of it idempotent.

`autostop.action: stop` on an SSH host runs the host's `stop_command` (e.g. the cloud's own stop CLI,
or ``[sudo, shutdown, -h, now]``) when one is configured; otherwise the host is only released (we
cannot power off a machine we do not own). Instance.data["autostop"] says which.
Sync/train/progress/logs/checkpoint come from `launchpad.vm.VMProvider`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from launchpad.errors import (
    AuthError,
    ConfigError,
    LaunchpadError,
    NoCapacity,
    ProviderError,
)
from launchpad.models import (
    JOB_TAG,
    Capability,
    Instance,
    InstanceSpec,
    InstanceState,
    Offer,
    TeardownMode,
)
from launchpad.per_node import run_per_node
from launchpad.plugins import hookimpl
from launchpad.preflight import Promise
from launchpad.ssh.hostkeys import HostKeyChanged
from launchpad.vm import VMProvider, resolve_root

from .hosts import Host, HostsFile, load_hosts

log = logging.getLogger("launchpad.ssh")

# Claim a host: `mkdir` is atomic, so of two jobs racing for a host exactly one wins. `job` (the job id
# alone) lets the release script below check ownership without parsing JSON in sh.
_CLAIM = r"""
root=$1 owner=$2 job=$3
mkdir -p -- "$root" || exit 3
if mkdir -- "$root/claim" 2>/dev/null; then
  printf '%s\n' "$job" > "$root/claim/job" &&
  printf '%s\n' "$owner" > "$root/claim/owner.json.tmp" &&
  mv -f -- "$root/claim/owner.json.tmp" "$root/claim/owner.json" || { rm -rf -- "$root/claim"; exit 4; }
  echo claimed; exit 0
fi
if [ -f "$root/claim/owner.json" ]; then echo held; cat -- "$root/claim/owner.json"; exit 0; fi
now=$(date +%s); made=$(stat -c %Y -- "$root/claim" 2>/dev/null || echo "$now")
if [ $((now - made)) -gt 60 ]; then rm -rf -- "$root/claim"; echo stale; exit 0; fi
echo busy
"""
_READ_CLAIM = 'cat -- "$1/claim/owner.json" 2>/dev/null || true'
_REWRITE_OWNER = r"""
root=$1 owner=$2 job=$3
[ "$(cat -- "$root/claim/job" 2>/dev/null)" = "$job" ] || exit 5
printf '%s\n' "$owner" > "$root/claim/owner.json.tmp" && mv -f -- "$root/claim/owner.json.tmp" "$root/claim/owner.json"
"""
# Delete the job's directory, then release the claim if (and only if) this job holds it.
_RELEASE = r"""
root=$1 job=$2 workdir=$3
rm -rf -- "$workdir" 2>/dev/null || { sleep 1; rm -rf -- "$workdir"; }
if [ "$(cat -- "$root/claim/job" 2>/dev/null)" = "$job" ]; then rm -rf -- "$root/claim"; echo released; fi
"""


@hookimpl
def launchpad_register_providers(register):
    register(SSHProvider)


class SSHProvider(VMProvider):
    name = "ssh"
    unsupported = {
        Capability.SPOT: "hosts in hosts.yaml are yours: there is no spot market",
    }

    def __init__(self, config=None):
        super().__init__(config)
        self._hosts: tuple[float, HostsFile] | None = None

    # -- configuration -----------------------------------------------------------------------------------
    @property
    def hosts_path(self) -> Path:
        from launchpad.settings import config_dir

        return Path(self.config.get("hosts_file") or config_dir() / "hosts.yaml")

    def hosts(self) -> HostsFile:
        path = self.hosts_path
        mtime = path.stat().st_mtime if path.exists() else 0.0
        if self._hosts is None or self._hosts[0] != mtime:
            self._hosts = (mtime, load_hosts(path))
        return self._hosts[1]

    def host(self, name: str) -> Host | None:
        return next((h for h in self.hosts().hosts if h.name == name), None)

    def default_key_path(self) -> Path:
        from launchpad.settings import config_dir

        return Path(self.config.get("key") or config_dir() / "ssh" / "id_ed25519")

    def check(self) -> str | None:
        try:
            import paramiko  # noqa: F401
        except ImportError:
            return "paramiko is not installed (pip install launchpad-ssh)"
        try:
            hosts = self.hosts().hosts
        except ConfigError as e:
            return str(e).splitlines()[0]
        if not hosts:
            return f"no hosts: list your machines in {self.hosts_path} (name, address, user, gpus; see README)"
        return None

    def default_checkpoint_uri(self) -> str | None:
        """hosts.yaml's top-level `checkpoint_uri`, else config.yaml's, else the hosts' own when they
        all name the same one; None otherwise (a file:// default would be a path on the remote host)."""
        try:
            hf = self.hosts()
        except ConfigError:
            return None
        if hf.checkpoint_uri or self.config.get("checkpoint_uri"):
            return hf.checkpoint_uri or self.config.get("checkpoint_uri")
        own = {h.checkpoint_uri for h in hf.hosts}
        return own.pop() if len(own) == 1 else None

    def offers(self) -> list[Offer]:
        out = []
        for h in self.hosts().hosts:
            g = h.gpu_info
            out.append(Offer(
                provider=self.name, instance_type=h.name, region=h.region, gpu=g.name, gpu_count=g.count,
                gpu_memory_gb=g.memory_gb, vcpus=h.vcpus, memory_gb=h.memory_gb, price_per_hour=h.price_per_hour,
                nvme_gb=h.nvme_gb, cuda=h.cuda,
            ))
        return out

    # -- reaching a host ----------------------------------------------------------------------------------
    def target_for(self, host: Host, *, timeout: float | None = None):
        from launchpad.ssh.keys import ensure_keypair
        from launchpad.ssh.target import resolve_target

        default_key = self.default_key_path()
        target = resolve_target(
            host.name, host.address, port=host.port, user=host.user, key_path=host.key, host_key=host.host_key,
            proxy_jump=host.proxy_jump, ssh_config=self.config.get("ssh_config"), default_key=str(default_key),
            connect_timeout=timeout or host.connect_timeout,
        )
        if target.key_path == str(default_key) and not default_key.exists():
            pub = ensure_keypair(default_key, comment="launchpad")
            log.warning("ssh: generated launchpad's key %s; add its public key to ~/.ssh/authorized_keys on "
                        "your hosts: %s", default_key, pub)
        return target

    def ssh_target(self, instance: Instance):
        host = self.host(instance.data.get("host", ""))
        if host is None:
            raise ProviderError(f"{instance.id}: host {instance.data.get('host')!r} is no longer in {self.hosts_path}",
                                provider=self.name)
        return self.target_for(host)

    def _open(self, host: Host, timeout: float | None = None):
        from launchpad.ssh.connection import SSHConnection

        return SSHConnection.open(self.target_for(host, timeout=timeout), self.known_hosts())

    # -- lifecycle -------------------------------------------------------------------------------------
    def provision(self, offer: Offer, spec: InstanceSpec) -> Instance:
        """Claim the offer's host (and, for `spec.nodes` > 1, as many other free hosts with the same
        GPUs as ranks 1..N-1). Idempotent per job: a host this job holds is returned as it was."""
        host = self.host(offer.instance_type)
        if host is None:
            raise NoCapacity(f"host {offer.instance_type} is not in {self.hosts_path} any more", provider=self.name)
        instance_id = f"ssh-{host.name}-{hashlib.sha256(spec.job_id.encode()).hexdigest()[:8]}"
        held, instance = self._claim(host, spec, lambda root: self._instance(instance_id, host, spec, offer, root))
        if held or spec.nodes <= 1:
            return instance
        nodes = [{"rank": 0, "host": host.name, "root": instance.data["root"], "address": self._node_address(host)}]
        for other in self.hosts().hosts:
            if len(nodes) == spec.nodes:
                break
            if other.name == host.name or other.gpu_info != host.gpu_info:
                continue
            try:
                _, node = self._claim(other, spec, lambda root: replace(instance, data={**instance.data, "root": root}))
            except NoCapacity as e:
                log.info("ssh: %s cannot be a node of %s: %s", other.name, spec.job_id, e)
                continue
            nodes.append({"rank": len(nodes), "host": other.name, "root": node.data["root"],
                          "address": self._node_address(other)})
        if len(nodes) < spec.nodes:
            for n in reversed(nodes):
                self._release(self.host(n["host"]), n["root"], spec.job_id)
            gpus = f"{host.gpu_info.count} x {host.gpu_info.name}" if host.gpu_info.name else "no GPU"
            raise NoCapacity(f"{spec.nodes} free hosts like {host.name} ({gpus}) are needed; {len(nodes)} are free",
                             provider=self.name, scope="offer")
        digest = int(hashlib.sha256(spec.job_id.encode()).hexdigest(), 16)
        port = int(self.config.get("master_port") or 29500 + digest % 1000)  # two jobs on one master: no clash
        instance = replace(instance, data={**instance.data, "nodes": nodes, "master_port": port})
        for n in nodes:  # every claim records the whole job, so instances() finds it from any node
            node_host = self.host(n["host"])
            assert node_host is not None  # claimed a moment ago from this very hosts.yaml
            self._write_owner(node_host, n["root"], spec, instance)
        return instance

    def _instance(self, instance_id: str, host: Host, spec: InstanceSpec, offer: Offer, root: str | None) -> Instance:
        data = {
            "host": host.name, "root": root, "token": spec.token, "python": host.python,
            "tags": {JOB_TAG: spec.job_id, **spec.tags, **host.labels},
            "autostop": (f"stop runs `{' '.join(host.stop_command)}` on the host" if host.stop_command
                         else "stop only releases the host (no stop_command in hosts.yaml)"),
        }
        return Instance(provider=self.name, id=instance_id, job_id=spec.job_id, state=InstanceState.RUNNING,
                        offer=offer, address=host.address, created_at=time.time(), data=data)

    def _root_on(self, conn, host: Host) -> str:
        """The host's launchpad root as an absolute path (created if missing)."""
        if host.root and host.root.startswith("/"):
            return host.root
        return resolve_root(conn, host.root or self.default_root)

    @staticmethod
    def _node_address(host: Host) -> str:
        return host.private_address or host.address

    def _claim(self, host: Host, spec: InstanceSpec, make: Callable[[str], Instance]) -> tuple[bool, Instance]:
        """Claim `host` for the job, recording `make(root)` in it: (False, that instance) when this call
        claimed it, (True, the recorded instance) when the job already held it; NoCapacity when another
        job holds it or it cannot be reached."""
        try:
            conn = self._open(host)
        except (AuthError, HostKeyChanged):
            raise
        except ProviderError as e:  # down or unreachable: try the next host
            raise NoCapacity(f"{host.name} is unreachable: {e}", provider=self.name) from None
        with conn:
            root = self._root_on(conn, host)
            instance = make(root)
            owner = json.dumps({"job_id": spec.job_id, "token": spec.token, "instance": instance.to_dict(),
                                "client": socket.gethostname(), "claimed_at": time.time()})
            for _ in range(20):
                res = conn.run(["sh", "-c", _CLAIM, "sh", root, owner, spec.job_id])
                word, _, rest = res.stdout.partition("\n")
                if word == "claimed":
                    return False, instance
                if word == "held":
                    held = _owner(rest)
                    if held.get("job_id") == spec.job_id:
                        return True, (Instance.from_dict(held["instance"]) if "instance" in held else instance)
                    raise NoCapacity(f"{host.name} is in use by job {held.get('job_id', '?')}", provider=self.name,
                                     scope="offer")
                time.sleep(0.25 if word == "stale" else 1.0)  # stale: retry at once; busy: being claimed now
        raise NoCapacity(f"{host.name}: could not claim it (another claim is in progress)", provider=self.name)

    def _write_owner(self, host: Host, root: str, spec: InstanceSpec, instance: Instance) -> None:
        """Record the final instance in the claim (instances() rebuilds it from there)."""
        owner = json.dumps({"job_id": spec.job_id, "token": spec.token, "instance": instance.to_dict(),
                            "client": socket.gethostname(), "claimed_at": time.time()})
        with self._open(host) as conn:
            conn.run(["sh", "-c", _REWRITE_OWNER, "sh", root, owner, spec.job_id])

    def _release(self, host: Host | None, root: str, job_id: str) -> None:
        """Release a claim taken during a provision that could not complete (no job directory yet)."""
        if host is None:
            return
        with self._open(host) as conn:
            conn.run(["sh", "-c", _RELEASE, "sh", root, job_id, f"{root}/jobs/.none"])

    def nodes(self, instance: Instance) -> list[Instance]:
        nodes = instance.data.get("nodes") or []
        if len(nodes) <= 1:
            return [instance]
        out = [instance]
        for n in nodes[1:]:
            out.append(Instance(
                provider=self.name, id=f"{instance.id}-n{n['rank']}", job_id=instance.job_id, state=instance.state,
                offer=instance.offer, address=n["address"], created_at=instance.created_at,
                data={**instance.data, "host": n["host"], "root": n["root"], "node_rank": n["rank"]},
            ))
        return out

    def _read_claim(self, conn, root: str) -> dict:
        return _owner(conn.run(["sh", "-c", _READ_CLAIM, "sh", root]).stdout)

    def teardown(self, instance: Instance, mode: TeardownMode = TeardownMode.TERMINATE) -> None:
        nodes = self.nodes(instance)
        # Every node's trainer at once: a worker stopped alone waits in a collective for its peers, which
        # would hold each node for the whole grace period, one after another. A host no longer listed is
        # left to _teardown_node, which says so.
        run_per_node(self._stop_node_agent, [n for n in nodes if self.host(n.data.get("host", ""))])
        for node in reversed(nodes):
            self._teardown_node(node, mode)

    def _stop_node_agent(self, instance: Instance) -> None:
        self._roots[instance.id] = instance.data["root"]
        self.stop_agent(instance)

    def _teardown_node(self, instance: Instance, mode: TeardownMode) -> None:
        host = self.host(instance.data.get("host", ""))
        if host is None:  # we cannot reach it, so we cannot say it is gone: its agent may still run
            raise ProviderError(f"{instance.id}: host {instance.data.get('host')!r} is no longer in {self.hosts_path}, "
                                "so launchpad cannot reach it; it may still be running", provider=self.name,
                                hint="put the host back under that name and run `launchpad down` again")
        root = instance.data["root"]  # its agent was stopped by teardown, with every other node's
        conn = self.connection(instance)
        if mode is TeardownMode.STOP and host.stop_command:
            if self._read_claim(conn, root).get("job_id") == instance.job_id:
                # keep the claim and the files (a stopped machine keeps its disk); the command may cut
                # the connection (shutdown), so it runs detached and nobody waits for it
                conn.run(["sh", "-c", 'nohup setsid "$@" >/dev/null 2>&1 </dev/null &', "sh", *host.stop_command])
                self.drop_connection(instance)
                return
        workdir = self.workdir(instance)  # checked to lie under <root>/jobs/
        conn.run(["sh", "-c", _RELEASE, "sh", root, instance.job_id, workdir])
        self.drop_connection(instance)

    def status(self, instance: Instance) -> InstanceState:
        host = self.host(instance.data.get("host", ""))
        if host is None:
            return InstanceState.UNKNOWN  # renamed or removed from hosts.yaml: not known to be gone
        try:
            conn = self.connection(instance)
        except (AuthError, ConfigError, HostKeyChanged):
            raise
        except ProviderError:  # unreachable
            if host.stop_command:
                return InstanceState.STOPPED  # unreachable after its stop command: powered off
            raise
        owner = self._read_claim(conn, instance.data["root"])
        if owner.get("job_id") != instance.job_id:
            return InstanceState.TERMINATED  # released (by teardown, or by the idle watchdog)
        return InstanceState.RUNNING

    def instances(self) -> list[Instance]:
        hosts = self.hosts().hosts

        def claimed(host: Host) -> Instance | None:
            try:
                with self._open(host, timeout=min(10.0, host.connect_timeout)) as conn:
                    root = self._root_on(conn, host)
                    owner = self._read_claim(conn, root)
            except LaunchpadError as e:
                log.warning("ssh: skipping %s: %s", host.name, e)
                return None
            if "instance" not in owner:
                return None
            try:
                inst = Instance.from_dict(owner["instance"])
            except (KeyError, ValueError, TypeError):
                return None
            if self.host(inst.data.get("host", "")) is None:  # renamed in hosts.yaml: it is where its claim is
                inst = replace(inst, data={**inst.data, "host": host.name})
            return inst

        if not hosts:
            return []
        with ThreadPoolExecutor(max_workers=min(8, len(hosts))) as pool:
            found = [i for i in pool.map(claimed, hosts) if i is not None]
        return list({i.id: i for i in found}.values())  # the nodes of a multi-node job share one instance

    def job_spec_extras(self, instance: Instance) -> dict[str, Any]:
        host = self.host(instance.data.get("host", ""))
        claim = f"{instance.data['root']}/claim"
        # What the agent's idle watchdog runs (argv, no shell) with the client gone: the host's
        # stop_command, or else releasing the claim, so an idle host is free for the next job.
        command = list(host.stop_command) if host and host.stop_command else ["rm", "-rf", "--", claim]
        extras: dict[str, Any] = {
            "autostop": {"command": command},
            "mount_nvme": bool(host and host.mount_nvme),  # never format disks on your own box unless asked
            "expect_nvme": bool(host and host.nvme_gb),
        }
        nodes = instance.data.get("nodes") or []
        if len(nodes) > 1:  # what the trainer's launcher needs (launchpad.train.launch)
            extras.update(nodes=[{"rank": n["rank"], "address": n["address"]} for n in nodes],
                          node_rank=int(instance.data.get("node_rank") or 0), master_addr=nodes[0]["address"],
                          master_port=int(instance.data["master_port"]))
        return extras

    def fabric_promise(self, instance: Instance) -> Promise | None:
        """The slowest `fabric_gbps` that hosts.yaml states for the job's hosts (the all-reduce is only as
        fast as its slowest link); None when none states one."""
        stated = []
        for node in self.nodes(instance):
            host = self.host(node.data.get("host", ""))
            if host is not None and host.fabric_gbps:
                stated.append((host.fabric_gbps, host.name))
        if not stated:
            return super().fabric_promise(instance)
        gbps, name = min(stated)
        return Promise(gbps, f"{self.hosts_path.name}: fabric_gbps of {name}")

    def checkpoint_uri_for(self, instance: Instance) -> str | None:
        """A host's own `checkpoint_uri` wins over the provider-wide default (the recipe's wins over both)."""
        host = self.host(instance.data.get("host", ""))
        return (host.checkpoint_uri if host is not None else None) or self.default_checkpoint_uri()

def _owner(text: str) -> dict:
    try:
        data = json.loads(text.strip() or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}
