"""`VMProvider`: the base for "a Linux machine you SSH into" (the SSH provider and most GPU clouds).

It implements `sync`, `train`, `progress`, `logs` and `checkpoint` over one command transport
(`launchpad.transport.CommandRunner`, from the `transport` hook: SSH by default), so a cloud subclass
adds only `offers`, `provision`, `teardown`, `status`, `instances` and `ssh_target` (or `transport`).

On the instance, everything lives under one root (default ``~/.launchpad`` of the login user)::

    <root>/wheels/launchpad-<version>+g<hash>-py3-none-any.whl   content-addressed: sent once per code version
    <root>/venvs/<key>/           one venv per host interpreter, reused while the wheel is unchanged
    <root>/jobs/<instance id>/    the agent's work directory (job.json, recipe.yaml, inputs/, train.log, ...)

The job tree is private (directories 0700, files 0600: datasets and recipes may be confidential, and
the agent runs with umask 077); the shared wheels and venvs keep the login user's default modes.

The agent is started detached (in a ``systemd-run --user --scope`` when the login user lingers, else
in a new session), so it survives the session, the client and its network. The recipe's env
(possibly secrets) reaches it over the command's stdin only (see launchpad.ssh.remote `launch`).

Checkpoints: the job spec's `checkpoint_uri` is opened ON THE INSTANCE. A ``file://`` URI is therefore a
path on the remote machine (fine when it is this machine, as in tests); real remote machines want
``s3://``, ``gs://`` or ``az://``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import re
import time
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

from .errors import ProviderError
from .jobspec import JobSpec
from .models import Bundle, CheckpointRef, Instance, JobProgress, TrainHandle
from .per_node import run_per_node
from .provider import Provider
from .transport import CommandRunner, ConnectionLost, RemoteCommandFailed
from .vm_preflight import MultiNodePreflight
from .vm_progress import NodeReport, job_progress

log = logging.getLogger("launchpad.ssh")

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Runs the launchpad helper with the venv's python, or exits 99 when that venv does not exist (yet).
_GUARD = 'test -x "$1" || exit 99; exec "$@"'
_HELPER_MISSING = 99
_NEED_CACHE = 10  # venv_setup: "a full install is due; give me the wheel cache" (launchpad.wheelcache)
# The job's own directories: private, whatever the login shell's umask.
_MKDIR_PRIVATE = 'umask 077 && mkdir -p -- "$@" && chmod 700 "$@"'  # absolute paths: no option clash


class VMProvider(MultiNodePreflight, Provider):
    """Sync/train/progress/logs/checkpoint over a `CommandRunner`. Subclasses implement `ssh_target`
    (or `transport`) plus the lifecycle methods of `Provider` that create and destroy machines. A
    multi-node sync calls `transport`, `ssh_target` and `job_spec_extras` from one thread per node (as
    the reaper already does per instance): they must not share unguarded mutable state."""

    #: where launchpad keeps its files on the instance; relative = under the login user's home
    default_root: ClassVar[str] = "~/.launchpad"

    def __init__(self, config=None):
        super().__init__(config)
        self._conns: dict[str, CommandRunner] = {}
        self._roots: dict[str, str] = {}
        #: what the last sync did (wheel sent or cached, venv reused or installed, files, bytes)
        self.last_sync: dict[str, Any] = {}

    # -- for subclasses ----------------------------------------------------------------------------------
    def transport(self, instance: Instance) -> CommandRunner:
        """A new, connected `CommandRunner` to `instance` (VMProvider caches it per instance and asks
        again once it dropped). Default: SSH to `ssh_target(instance)` with pinned host keys; a subclass
        that reaches its machines another way (kubectl exec) overrides this instead of `ssh_target`."""
        from .ssh.connection import SSHConnection

        return SSHConnection.open(self.ssh_target(instance), self.known_hosts())

    def ssh_target(self, instance: Instance):
        """The `launchpad.ssh.target.SSHTarget` to reach `instance` (address, user, key, pinned host key)."""
        raise NotImplementedError(f"{type(self).__name__} must implement ssh_target() or transport()")

    def remote_python(self, instance: Instance) -> str:
        """The interpreter on the instance the venv is created from."""
        return instance.data.get("python") or self.config.get("python") or "python3"

    def remote_root(self, instance: Instance) -> str:
        return instance.data.get("root") or self.config.get("root") or self.default_root

    def job_spec_extras(self, instance: Instance) -> dict[str, Any]:
        """Changes to the job spec for this instance, applied with `JobSpec.replace` (e.g. ``autostop``
        with the self-stop command for the idle watchdog; for a node of a multi-node job: ``nodes``,
        ``node_rank``, ``master_addr``, ``master_port``)."""
        return {}

    def nodes(self, instance: Instance) -> list[Instance]:
        """The machines of the job, rank 0 first; each is synced and runs its own agent. A multi-node
        subclass returns one `Instance` per node (rank 0 being `instance` itself). Progress, logs and
        checkpoints come from rank 0, where the trainer's global rank 0 reports and uploads (progress
        reads the others too, for an agent that ended badly there)."""
        return [instance]

    def known_hosts(self):
        from .ssh.hostkeys import KnownHosts

        return KnownHosts(self.config.get("known_hosts"))

    # -- connections -------------------------------------------------------------------------------------
    def connection(self, instance: Instance) -> CommandRunner:
        """A live transport to `instance` (cached; reopened when it dropped)."""
        conn = self._conns.get(instance.id)
        if conn is not None and conn.alive:
            return conn
        if conn is not None:
            conn.close()
        conn = self.transport(instance)
        self._conns[instance.id] = conn
        return conn

    def drop_connection(self, instance: Instance) -> None:
        conn = self._conns.pop(instance.id, None)
        if conn is not None:
            conn.close()

    def _call(self, instance: Instance, fn: Callable[[CommandRunner], Any]) -> Any:
        """fn(connection), once more on a fresh connection if the first one dropped (fn must be idempotent)."""
        try:
            return fn(self.connection(instance))
        except ConnectionLost as e:
            log.info("%s; reconnecting", e)
            self.drop_connection(instance)
            return fn(self.connection(instance))

    # -- paths on the instance ---------------------------------------------------------------------------
    def root(self, instance: Instance) -> str:
        """The absolute root directory on the instance (created if missing)."""
        if instance.id in self._roots:
            return self._roots[instance.id]
        root = self.remote_root(instance)
        if not root.startswith("/"):
            root = self._call(instance, lambda c: resolve_root(c, root))
        self._roots[instance.id] = root
        return root

    def workdir(self, instance: Instance) -> str:
        """``<root>/jobs/<instance id>``; the id is checked, so this never names anything else."""
        if not _SAFE_ID.match(instance.id) or instance.id in (".", ".."):
            raise ProviderError(f"instance id {instance.id!r} cannot name a directory", provider=self.name)
        return f"{self.root(instance)}/jobs/{instance.id}"

    def venv_dir(self, instance: Instance) -> str:
        key = hashlib.sha256(self.remote_python(instance).encode()).hexdigest()[:12]
        return f"{self.root(instance)}/venvs/{key}"

    def venv_python(self, instance: Instance) -> str:
        return f"{self.venv_dir(instance)}/bin/python"

    def _helper(self, instance: Instance, *args: str, stdin: str | None = None, timeout: float = 120):
        """Run ``python -m launchpad.ssh.remote ARGS`` in the instance's venv: its JSON line, or None
        when the venv does not exist (nothing was synced, so nothing runs there)."""
        argv = ["sh", "-c", _GUARD, "sh", self.venv_python(instance), "-m", "launchpad.ssh.remote", *args]
        res = self._call(instance, lambda c: c.run(argv, stdin=stdin, timeout=timeout, check=False))
        if res.rc == _HELPER_MISSING:
            return None
        if res.rc != 0:
            tail = " | ".join((res.stderr.strip() or res.stdout.strip()).splitlines()[-3:])
            raise ProviderError(f"{instance.id}: launchpad helper `{args[0]}` failed ({res.rc}): {tail}", provider=self.name)
        lines = res.stdout.strip().splitlines()
        return json.loads(lines[-1]) if lines else None

    # -- sync ----------------------------------------------------------------------------------------------
    def python_extras(self, instance: Instance, spec: JobSpec) -> list[str]:
        """The extras of launchpad installed on the host: ``train`` and the SDK of the job's store
        (the agent uploads checkpoints with it). Config ``extras: [...]`` replaces the list."""
        if isinstance(self.config.get("extras"), list):
            return [str(e) for e in self.config["extras"]]
        extras = ["train"]
        scheme = (spec.checkpoint_uri or "").split("://", 1)[0] if "://" in (spec.checkpoint_uri or "") else "file"
        store_extra = {"s3": "s3", "gs": "gcs", "az": "azure"}.get(scheme)
        return extras + ([store_extra] if store_extra else [])

    def python_index(self, instance: Instance) -> dict[str, Any] | None:
        """Where a bare host installs from, when not from its own pip configuration: config keys
        ``index_url``, ``extra_index_urls``, ``find_links`` (given to uv and pip alike)."""
        index = {k: self.config.get(k) for k in ("index_url", "extra_index_urls", "find_links") if self.config.get(k)}
        return index or None

    def sync(self, instance: Instance, bundle: Bundle) -> None:
        """Every node at once, one thread each: a node's time goes to its own machine's installs and
        network, so N nodes take about as long as one (as SkyPilot's parallel setup) instead of N times
        as long with every GPU billing. Waits for all of them; a failure is raised after that, the
        lowest rank's first. `last_sync` keeps rank 0's figures, with phases spanning every node."""
        from .wheel import build_wheel

        nodes = self.nodes(instance)
        wheel = build_wheel()  # once, before the threads
        several = len(nodes) > 1  # then each node's uploads get a bar of their own
        synced = run_per_node(lambda node: self._sync_node(node, bundle, wheel, f" ({node.id})" if several else ""), nodes)
        if not several:
            self.last_sync = synced[0]
            return
        phases: dict[str, list[float]] = {}
        for stats in synced:
            for name, (start, end) in stats.get("phases", {}).items():
                span = phases.setdefault(name, [start, end])
                span[0], span[1] = min(span[0], start), max(span[1], end)
        per_node = [{"id": node.id, "phases": stats.get("phases", {})} for node, stats in zip(nodes, synced, strict=True)]
        self.last_sync = {**synced[0], "phases": phases, "nodes": per_node}

    def _sync_node(self, node: Instance, bundle: Bundle, wheel: Path, tag: str) -> dict[str, Any]:
        try:
            return self._sync(node, bundle, wheel, tag)
        except ConnectionLost as e:  # resumable: the wheel and files already sent are not sent again
            log.info("%s; reconnecting to finish the sync", e)
            self.drop_connection(node)
            return self._sync(node, bundle, wheel, tag)

    def _sync(self, instance: Instance, bundle: Bundle, wheel: Path, tag: str) -> dict[str, Any]:
        """Send the code and the job's files, then prepare the Python environment. Returns what was done
        and when (wall-clock spans: reachable = until the first command on the instance returned, sync =
        the code and files, environment = the venv set-up and the environment check). `tag` tells this
        node's uploads apart in the progress bars."""
        t_start = time.time()
        conn = self.connection(instance)
        root, workdir = self.root(instance), self.workdir(instance)
        stats: dict[str, Any] = {"files": 0, "bytes": 0}
        conn.run(["sh", "-c", _MKDIR_PRIVATE, "sh", f"{root}/jobs", workdir, f"{workdir}/inputs"])
        t_reachable = time.time()
        conn.run(["mkdir", "-p", "--", f"{root}/wheels", f"{root}/venvs"])

        remote_wheel = f"{root}/wheels/{wheel.name}"
        cached = conn.stat(remote_wheel)
        if cached is not None and cached.size == wheel.stat().st_size:  # the name carries the content hash
            stats["wheel"] = "cached"
        else:
            stats["bytes"] += conn.put_file(wheel, remote_wheel, progress=self._progress(wheel.name + tag), mode=0o644)
            stats["wheel"] = "sent"

        recipe = json.loads(json.dumps(dict(bundle.job_spec.recipe)))  # a deep copy
        inputs = f"{workdir}/inputs"
        for i, ds in enumerate(recipe.get("datasets") or []):
            if _is_local(ds.get("path")):
                ds["path"] = self._push(conn, Path(ds["path"]), f"{inputs}/dataset-{i}", stats, tag)
        if _is_local(recipe.get("base_model")) and Path(recipe["base_model"]).is_dir():
            recipe["base_model"] = self._push(conn, Path(recipe["base_model"]), f"{inputs}/model", stats, tag)
        if _is_local(recipe.get("deepspeed")):
            recipe["deepspeed"] = self._push(conn, Path(recipe["deepspeed"]), f"{inputs}/deepspeed", stats, tag)
        start = (recipe.get("checkpoint") or {}).get("resume_from")
        if isinstance(start, str) and _is_local(start) and Path(start).is_dir():  # where the first attempt starts
            recipe["checkpoint"]["resume_from"] = self._push(conn, Path(start), f"{inputs}/resume-from", stats, tag)

        spec = bundle.job_spec.replace(recipe=recipe, workdir=workdir, status_path=f"{workdir}/status.json",
                                       **self.job_spec_extras(instance))
        # never the resolved env: secrets stay in memory and travel over stdin at `train`
        conn.put_bytes(spec.dumps().encode(), f"{workdir}/job.json")
        conn.put_bytes(bundle.recipe_text.encode(), f"{workdir}/recipe.yaml")
        t_files = time.time()
        stats.update(self._prepare_python(conn, instance, spec, wheel, remote_wheel))
        stats["phases"] = {"reachable": [t_start, t_reachable], "sync": [t_reachable, t_files],
                           "environment": [t_files, time.time()]}
        log.info("synced %s: wheel %s, venv %s (%s), %d files (%d bytes) sent",
                 instance.id, stats["wheel"], stats["venv"], stats.get("installer"), stats["files"], stats["bytes"])
        return stats

    def _prepare_python(self, conn: CommandRunner, instance: Instance, spec: JobSpec, wheel: Path,
                        remote_wheel: str) -> dict[str, Any]:
        """The venv on the host (launchpad.ssh.venv_setup: reuse the host's stack, else install it with uv,
        from the job store's wheel cache when it has this key) and the environment check in it."""
        from .train.envcheck import EnvironmentMismatch
        from .wheelcache import HOST_PROBE, PENDING_FILE, cache_key, requirement_lines, source_for

        python, workdir = self.remote_python(instance), self.workdir(instance)
        hint = "set `python:` to an interpreter with venv support (Python >= 3.10)"
        res = conn.run([python, "-c", HOST_PROBE], check=False, timeout=120)
        if res.rc != 0 or not res.stdout.strip():
            tail = " | ".join((res.stderr.strip() or res.stdout.strip()).splitlines()[-3:])
            raise ProviderError(f"{instance.id}: `{python}` does not run on the host: {tail}", provider=self.name, hint=hint)
        host = json.loads(res.stdout.strip().splitlines()[-1])
        extras = self.python_extras(instance, spec)
        key = cache_key(host, requirement_lines(wheel, extras))
        use_cache = self.config.get("wheel_cache", True)
        cache = source_for(spec.checkpoint_uri, key, look=False) if use_cache else {"key": key}
        config = {"venv": self.venv_dir(instance), "wheel": remote_wheel, "extras": extras, "root": self.root(instance),
                  "installer": self.config.get("installer", "auto"), "index": self.python_index(instance),
                  "cache": cache, "check": {"out": f"{workdir}/env.json", "spec": f"{workdir}/job.json"}
                  if self.config.get("env_check", True) else None}
        config_path = f"{workdir}/venv-setup.json"  # 0600: presigned URLs are short-lived credentials
        source = resources.files("launchpad.ssh").joinpath("venv_setup.py").read_text(encoding="utf-8")
        for _ in range(2):
            conn.put_bytes(json.dumps(config).encode(), config_path)
            res = conn.run([python, "-", config_path], stdin=source, timeout=3600, check=False)
            if res.rc != _NEED_CACHE:
                break
            # a full install is due: only now read the store's cache (index, presigned URLs) and run again
            cache = config["cache"] = source_for(spec.checkpoint_uri, key)
        if res.rc != 0:
            lines = (res.stderr.strip() or res.stdout.strip()).splitlines()
            if res.rc == 3:  # the environment check: this stack cannot run the recipe
                raise EnvironmentMismatch(f"{instance.id}: {lines[-1].removeprefix('venv setup: ') if lines else 'failed'}")
            tail = " | ".join(lines[-3:])
            raise ProviderError(f"{instance.id}: preparing the Python environment failed: {tail}", provider=self.name,
                                hint=hint if " -m venv " in tail or "Python >=" in tail else
                                "check the host's package index settings (pip.conf, PIP_INDEX_URL) or set `index_url`")
        out = json.loads(res.stdout.strip().splitlines()[-1])
        stats: dict[str, Any] = {"venv": out["action"], "env_seconds": out.get("seconds", {}), "cache_key": key}
        stats.update({k: out[k] for k in ("installer", "source") if out.get(k)})  # absent when the venv was reused
        house = out.get("wheelhouse")
        if house and cache.get("readable"):  # the agent uploads it while the job runs
            pending = {**house, "fields": host, "installer": out.get("installer")}
            conn.put_bytes(json.dumps(pending).encode(), f"{workdir}/{PENDING_FILE}")
            stats["wheel_cache"] = "to upload" if house.get("complete") else "incomplete"
        elif house:
            stats["wheel_cache"] = "not readable from this store"
        return stats

    def _progress(self, what: str):
        cb = self.transfer_progress
        return (lambda done, total: cb(what, done, total)) if cb else None

    def _push(self, conn, local: Path, remote_dir: str, stats: dict, tag: str = "") -> str:
        """Upload a local file or folder into `remote_dir`; returns its remote path. A file whose remote
        copy has the same size and mtime is skipped (rsync's quick check), so a re-sync is cheap."""
        if local.is_file():
            target = f"{remote_dir}/{local.name}"
            pairs = [(local, target)]
        else:
            target = f"{remote_dir}/{local.name}"
            pairs = [(p, f"{target}/{p.relative_to(local).as_posix()}") for p in sorted(local.rglob("*")) if p.is_file()]
        dirs = sorted({posixpath.dirname(r) for _, r in pairs} | {remote_dir, target if local.is_dir() else remote_dir})
        for i in range(0, len(dirs), 200):  # bounded command lines for folders with many subfolders
            conn.run(["sh", "-c", _MKDIR_PRIVATE, "sh", *dirs[i:i + 200]])
        for path, remote in pairs:
            st, rst = path.stat(), conn.stat(remote)
            if rst is not None and rst.size == st.st_size and rst.mtime == int(st.st_mtime):
                continue
            stats["bytes"] += conn.put_file(path, remote, progress=self._progress(path.name + tag), mode=0o600)
            conn.set_mtime(remote, st.st_mtime)
            stats["files"] += 1
        return target

    # -- train / progress / logs / checkpoint -----------------------------------------------------------
    def train(self, instance: Instance, bundle: Bundle) -> TrainHandle:
        return run_per_node(lambda node: self._launch(node, bundle), self.nodes(instance))[0]  # agents start together

    def _launch(self, instance: Instance, bundle: Bundle) -> TrainHandle:
        argv = ["launch", self.workdir(instance)]
        prefix = self._detach_prefix(instance)
        env = json.dumps(dict(bundle.env))
        if prefix:
            full = [*prefix, self.venv_python(instance), "-m", "launchpad.ssh.remote", *argv]
            res = self._call(instance, lambda c: c.run(full, stdin=env, timeout=60))
            out = json.loads(res.stdout.strip().splitlines()[-1])
        else:
            out = self._helper(instance, *argv, stdin=env, timeout=60)
            if out is None:
                raise ProviderError(f"{instance.id}: not synced yet (no launchpad venv on the host)", provider=self.name)
        return TrainHandle(instance.id, out.get("pid"), time.time())

    def _detach_prefix(self, instance: Instance) -> list[str]:
        """``systemd-run --user --scope`` when the login user lingers (its systemd outlives its sessions),
        so the agent survives even where logind kills a session's processes at logout. Without lingering
        a user scope would die with the user manager at logout, so then [] and the helper's new session
        (setsid) does it, which survives logout under logind's default KillUserProcesses=no."""
        if self.config.get("systemd") is False:
            return []
        probe = ["sh", "-c", 'test "$(loginctl show-user "$(id -un)" -p Linger --value 2>/dev/null)" = yes'
                 ' && systemd-run --user --scope --quiet true']
        res = self._call(instance, lambda c: c.run(probe, check=False, timeout=30))
        if res.rc != 0:
            return []
        unit = f"launchpad-{instance.id}-{int(time.time())}"
        return ["systemd-run", "--user", "--scope", "--quiet", "--collect", f"--unit={unit}"]

    def progress(self, instance: Instance) -> JobProgress:
        """Rank 0's report; on a multi-node job every node is read at once, and one whose agent ended badly
        ends the job (`launchpad.vm_progress`: torch.distributed would notice only at its timeouts)."""
        nodes = self.nodes(instance)
        head, *peers = run_per_node(lambda node: self._node_report(node, head=node is instance), nodes)
        assert head is not None  # only another node's report may be missing (_node_report raises for rank 0)
        named = zip((f"node {i} ({n.id})" for i, n in enumerate(nodes[1:], start=1)), peers, strict=True)
        return job_progress(head.progress, list(named))

    def _node_report(self, node: Instance, *, head: bool) -> NodeReport | None:
        try:
            out = self._helper(node, "progress", self.workdir(node))
        except ProviderError as e:
            if head:
                raise
            log.debug("progress of %s not read: %s", node.id, e)  # a lost machine is status()'s to find
            return None
        if not out:
            return NodeReport(JobProgress())
        return NodeReport(JobProgress.from_status(out.get("status") or {}, running=bool(out.get("running")),
                                                  exit_code=out.get("exit_code")), out.get("ended_s"))

    def logs(self, instance: Instance, *, follow: bool = False) -> Iterator[str]:
        """The trainer log's lines. With `follow`, a dropped connection is re-established (bounded by
        the target's connect timeout) and the log continues from the last complete line."""
        offset, pending = 0, b""
        while True:
            argv = ["sh", "-c", _GUARD, "sh", self.venv_python(instance), "-m", "launchpad.ssh.remote", "tail",
                    self.workdir(instance), "--offset", str(offset), *(["--follow"] if follow else [])]
            try:
                for chunk in self.connection(instance).stream(argv):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        offset += len(line) + 1
                        yield line.decode("utf-8", "replace")
            except ConnectionLost as e:
                if not follow:
                    raise
                log.warning("%s; reconnecting to follow the log from byte %d", e, offset)
                self.drop_connection(instance)
                pending = b""
                continue
            except RemoteCommandFailed as e:
                if e.rc == _HELPER_MISSING:
                    return  # nothing was synced: there is no log
                raise
            if pending:
                yield pending.decode("utf-8", "replace")
            return

    def request_save(self, instance: Instance) -> None:
        save_now = f"{self.workdir(instance)}/SAVE_NOW"  # the agent's flag (launchpad.agent FILES)
        self._call(instance, lambda c: c.run(["sh", "-c", 'test ! -d "${1%/*}" || touch -- "$1"', "sh", save_now]))

    def latest_checkpoint(self, instance: Instance) -> CheckpointRef | None:
        """The newest complete checkpoint of the instance's job, looked up where it can be: from here for
        object stores (this client has the credentials the recipe's env resolved; an SSH session on the
        host does not), on the instance for file:// (a path there) or when this client cannot open it."""
        spec = self._remote_spec(instance)
        uri = spec.checkpoint_uri if spec else None
        if spec and uri and not uri.startswith("file://"):
            from .errors import LaunchpadError
            from .storage import open_store
            from .storage.checkpoints import latest_checkpoint

            try:
                return latest_checkpoint(open_store(uri), spec.job_id)
            except (LaunchpadError, ImportError) as e:
                log.info("cannot open %s from here (%s); asking the instance", uri, e)
        out = self._helper(instance, "latest", self.workdir(instance))
        return CheckpointRef(**out) if out else None

    def salvage(self, instance: Instance) -> list[CheckpointRef]:
        out = self._helper(instance, "salvage", self.workdir(instance), timeout=900) or {}
        return [CheckpointRef(**r) for r in out.get("uploaded", [])]

    def _remote_spec(self, instance: Instance) -> JobSpec | None:
        """The job.json sync wrote on the instance, or None (not synced yet, or unreadable)."""
        from .errors import BadInput

        path = f"{self.workdir(instance)}/job.json"
        res = self._call(instance, lambda c: c.run(["cat", "--", path], check=False, timeout=60))
        try:
            return JobSpec.from_json(json.loads(res.stdout), source=path, on_instance=True) if res.rc == 0 else None
        except (ValueError, BadInput):
            return None

    # -- for teardown ------------------------------------------------------------------------------------
    def stop_agent(self, instance: Instance, grace: float = 10.0) -> None:
        """SIGTERM the agent and trainer on the instance, SIGKILL after `grace` s. Silent if none runs."""
        self._helper(instance, "stop", self.workdir(instance), "--grace", str(grace), timeout=grace + 60)

    def clean_workdir(self, instance: Instance) -> None:
        workdir = self.workdir(instance)
        self._call(instance, lambda c: c.run(["rm", "-rf", "--", workdir]))

    # -- multi-node preflight: launchpad.vm_preflight (its other hooks) and launchpad.preflight --------
    def run_probe(self, instance: Instance, args: list[str], *, stdin: str, timeout: float):
        """``python -m launchpad.agent.probe ARGS`` in the instance's venv; its `Result` (exit 99: not synced)."""
        argv = ["sh", "-c", _GUARD, "sh", self.venv_python(instance), "-m", "launchpad.agent.probe", *args]
        return self._call(instance, lambda c: c.run(argv, stdin=stdin, timeout=timeout, check=False))

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()


def resolve_root(conn, root: str) -> str:
    """Create `root` on the host and return it absolute (``~/x`` and relative paths are under the
    login user's home, where SSH sessions start)."""
    rel = root[2:] if root.startswith("~/") else ("." if root == "~" else root)
    res = conn.run(["sh", "-c", 'mkdir -p -- "$1" && cd -- "$1" && pwd -P', "sh", rel])
    return res.stdout.strip().splitlines()[-1]


def _is_local(value: Any) -> bool:
    return isinstance(value, str) and "://" not in value and os.path.isabs(value) and os.path.exists(value)

