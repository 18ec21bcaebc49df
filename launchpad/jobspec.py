"""The job spec: the one typed description of a job that travels from `launchpad up` to the trainer.

Built once by `Lifecycle.submit`, stored in the state DB, changed only by copy-with-changes
(`spec.replace(...)`), written to the instance as ``job.json`` by a provider's `sync`, and read there by
the agent and the trainer through one loader, `JobSpec.load`. Only this module knows the JSON shape::

    {"job_id": "smoke-lora-3f9a1c",
     "recipe": <Recipe.model_dump(mode="json", exclude_unset=True)>,  # local paths: the client's until sync rewrites them
     "checkpoint_uri": "s3://bucket/ckpts",          # store ROOT, resolved before the first sync and kept,
                                                     # so `resume` never depends on a provider default
     "max_steps": null,                              # wins over recipe.max_steps (`up --smoke`)
     "deepspeed_config": {...} | null,               # the config itself: the recipe's path is the client's
     "env_names": ["HF_TOKEN"],                      # names only: values travel in memory, never stored
     "autostop": {"idle_minutes": 30, "action": "stop", "command": [...] | null,
                  "idle_seconds": null, "gpu_threshold": 10},
     "preemption": ["aws"], "preemption_poll_seconds": 2.0, "preemption_save_seconds": 110,
     "mount_nvme": false, "expect_nvme": true,
     # set on the instance by sync:
     "workdir": "/abs/instance/dir", "status_path": "/abs/instance/dir/status.json",
     # multi-node (resources.nodes > 1): every node gets the same list and its own rank
     "nodes": [{"rank": 0, "address": "10.0.0.5"}, ...], "node_rank": 0,
     "master_addr": "10.0.0.5", "master_port": 29500}

It sits at the bottom floor (imports only `errors`): the agent, the trainer, providers and the
lifecycle all import it; it imports none of them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import BadInput

SPEC_FILE = "job.json"
_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_ADDRESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")  # a host name, IPv4 or IPv6 address
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_MAX_SPEC_BYTES = 16 * 2**20  # a job.json is kilobytes; refuse to read a runaway file whole


@dataclass(frozen=True)
class Node:
    rank: int
    address: str


@dataclass(frozen=True)
class AutostopSpec:
    """What the agent does once the machine is idle. `command` is an argv (never a shell line) that a
    provider sets (its stop/terminate call, or releasing an SSH host); None = nothing bills, just end."""

    idle_minutes: float = 30.0
    action: str = "stop"  # stop | terminate
    command: tuple[str, ...] | None = None
    idle_seconds: float | None = None  # overrides idle_minutes (tests, local)
    gpu_threshold: float = 10.0

    @property
    def seconds(self) -> float:
        return float(self.idle_seconds) if self.idle_seconds else 60.0 * float(self.idle_minutes)


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    recipe: Mapping[str, Any]  # Recipe.model_dump(mode="json"); typed by `recipe_model()`
    checkpoint_uri: str | None = None
    max_steps: int | None = None
    deepspeed_config: Mapping[str, Any] | None = None
    env_names: tuple[str, ...] = ()
    autostop: AutostopSpec = field(default_factory=AutostopSpec)
    preemption: tuple[str, ...] = ()  # notice sources the agent polls: "aws", "gcp", "azure"
    preemption_poll_seconds: float = 2.0
    preemption_save_seconds: float = 110.0
    mount_nvme: bool = False  # may the agent format and mount an empty NVMe disk?
    expect_nvme: bool = True  # warn when no NVMe is found
    workdir: str | None = None
    status_path: str | None = None
    nodes: tuple[Node, ...] = ()
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    #: environment the provider sets for the trainer (not secrets: NCCL/EFA settings, ...); the
    #: instance's own environment wins, and the recipe's `env` (resolved at launch) wins over both
    env: Mapping[str, str] = field(default_factory=dict)

    # -- building ----------------------------------------------------------------------------------------
    @classmethod
    def from_recipe(cls, job_id: str, recipe: Any, *, max_steps: int | None = None,
                    deepspeed_config: Mapping[str, Any] | None = None) -> JobSpec:
        """The spec of a new job (`recipe` is a validated `launchpad.recipe.Recipe`)."""
        return cls(
            # exclude_unset: what the user wrote, not the defaults, so a resumed job's recipe still tells an
            # explicit choice (`autostop.action: stop`, which rules out providers that cannot stop) from a default
            # (the adapter always: its default changed from lora to full, and a resumed job must keep its kind)
            job_id=job_id, recipe={**recipe.model_dump(mode="json", exclude_unset=True), "adapter": recipe.adapter},
            checkpoint_uri=recipe.checkpoint.uri,
            max_steps=max_steps, deepspeed_config=deepspeed_config, env_names=tuple(sorted(recipe.env)),
            autostop=AutostopSpec(idle_minutes=float(recipe.autostop.idle_minutes), action=recipe.autostop.action),
        )

    def replace(self, **changes: Any) -> JobSpec:
        """A copy with `changes` (the only way a spec changes)."""
        if isinstance(changes.get("autostop"), Mapping):
            changes["autostop"] = dataclasses.replace(self.autostop, **_autostop_fields(changes["autostop"]))
        if "nodes" in changes:
            changes["nodes"] = tuple(n if isinstance(n, Node) else Node(int(n["rank"]), str(n["address"]))
                                     for n in changes["nodes"] or ())
        for key in ("preemption", "env_names"):
            if key in changes:
                changes[key] = tuple(changes[key] or ())
        if "env" in changes:
            changes["env"] = {str(k): str(v) for k, v in (changes["env"] or {}).items()}
        return dataclasses.replace(self, **changes)

    def recipe_model(self):
        """The recipe as a validated `Recipe` (shape only: no file-system checks)."""
        from .recipe import Recipe

        return Recipe.model_validate(dict(self.recipe))

    @property
    def checkpoint_keep(self) -> int:
        return int((self.recipe.get("checkpoint") or {}).get("keep") or 3)

    # -- JSON ------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["autostop"]["command"] = list(self.autostop.command) if self.autostop.command is not None else None
        data["env_names"] = list(self.env_names)
        data["preemption"] = list(self.preemption)
        data["nodes"] = [{"rank": n.rank, "address": n.address} for n in self.nodes]
        data["env"] = dict(self.env)
        return json.loads(json.dumps(data))  # plain JSON types only (deep copy)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    @classmethod
    def from_json(cls, data: Any, *, source: str = "job spec", on_instance: bool = False) -> JobSpec:
        """Check and build. Raises BadInput with one line per problem, each naming `source` and the key.
        `on_instance`: also require what sync sets (checkpoint_uri, absolute workdir and status_path)."""
        if not isinstance(data, dict):
            raise BadInput(f"{source} is not a JSON object")
        problems = _problems(source, data, on_instance)
        if problems:
            raise BadInput("\n".join(problems))
        autostop = data.get("autostop") or {}
        return cls(
            job_id=data["job_id"], recipe=data["recipe"], checkpoint_uri=data.get("checkpoint_uri"),
            max_steps=data.get("max_steps"), deepspeed_config=data.get("deepspeed_config"),
            env_names=tuple(data.get("env_names") or ()),
            autostop=AutostopSpec(**_autostop_fields(autostop)),
            preemption=tuple(data.get("preemption") or ()),
            preemption_poll_seconds=float(data.get("preemption_poll_seconds", 2.0)),
            preemption_save_seconds=float(data.get("preemption_save_seconds", 110.0)),
            mount_nvme=bool(data.get("mount_nvme", False)), expect_nvme=bool(data.get("expect_nvme", True)),
            workdir=data.get("workdir"), status_path=data.get("status_path"),
            nodes=tuple(Node(int(n["rank"]), n["address"]) for n in data.get("nodes") or ()),
            node_rank=data.get("node_rank"), master_addr=data.get("master_addr"), master_port=data.get("master_port"),
            env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
        )

    @classmethod
    def load(cls, path: str | Path) -> JobSpec:
        """The one loader for ``job.json`` on an instance (the agent and the trainer both use it)."""
        path = Path(path)
        try:
            with open(path, "rb") as f:
                raw = f.read(_MAX_SPEC_BYTES + 1)
        except FileNotFoundError:
            raise BadInput(f"job spec {path} does not exist") from None
        except OSError as e:
            raise BadInput(f"job spec {path} is not readable: {e}") from None
        if len(raw) > _MAX_SPEC_BYTES:
            raise BadInput(f"job spec {path} is larger than {_MAX_SPEC_BYTES >> 20} MiB")
        try:
            data = json.loads(raw)
        except ValueError as e:
            raise BadInput(f"job spec {path} is not readable JSON: {e}") from None
        return cls.from_json(data, source=str(path), on_instance=True)

    def write(self, path: str | Path) -> None:
        """Atomically, 0600: the spec names datasets and buckets (never secrets, but still private)."""
        import os

        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(self.dumps())
        os.replace(tmp, path)


def _autostop_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    known = {f.name for f in dataclasses.fields(AutostopSpec)}
    out = {k: v for k, v in data.items() if k in known}
    for key in ("idle_minutes", "action", "gpu_threshold"):  # None = keep the default
        if out.get(key) is None:
            out.pop(key, None)
    if out.get("command") is not None:
        out["command"] = tuple(str(a) for a in out["command"])
    return out


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _problems(src: str, data: dict[str, Any], on_instance: bool) -> list[str]:
    problems = []
    required = ("job_id", "checkpoint_uri", "workdir", "status_path") if on_instance else ("job_id",)
    for key in required:
        if not isinstance(data.get(key), str) or not data[key]:
            problems.append(f"{src}: {key}: required, a non-empty string")
    if not isinstance(data.get("recipe"), dict):
        problems.append(f"{src}: recipe: required, an object (Recipe.model_dump(mode='json'))")
    if isinstance(data.get("job_id"), str) and data["job_id"] and not _JOB_ID.match(data["job_id"]):
        problems.append(f"{src}: job_id: letters, digits, '.', '_' and '-' only (it names store keys)")
    max_steps = data.get("max_steps")
    if max_steps is not None and (not _is_int(max_steps) or max_steps < 1):
        problems.append(f"{src}: max_steps: must be a positive integer or null (got {max_steps!r})")
    for key in ("workdir", "status_path"):
        if isinstance(data.get(key), str) and data[key] and not Path(data[key]).is_absolute():
            problems.append(f"{src}: {key}: must be an absolute path (got {data[key]!r})")
    ds = data.get("deepspeed_config")
    if ds is not None and not isinstance(ds, dict):
        problems.append(f"{src}: deepspeed_config: must be an object or null")
    autostop = data.get("autostop")
    if autostop is not None and not isinstance(autostop, dict):
        problems.append(f"{src}: autostop: must be an object")
    elif autostop and autostop.get("command") is not None and not (
            isinstance(autostop["command"], list) and all(isinstance(a, str) for a in autostop["command"])):
        problems.append(f"{src}: autostop.command: must be an argv list of strings (never a shell line)")
    for key in ("preemption", "env_names"):
        value = data.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            problems.append(f"{src}: {key}: must be a list of strings")
    env = data.get("env")
    if env is not None and not (isinstance(env, dict) and all(
            isinstance(k, str) and _ENV_NAME.match(k) and isinstance(v, str) for k, v in env.items())):
        problems.append(f"{src}: env: must be an object of NAME: string")
    return problems + _multinode_problems(src, data)


def _multinode_problems(src: str, data: dict[str, Any]) -> list[str]:
    """Checks of the optional multi-node keys; addresses end up in a launcher's argv and a hostfile."""
    problems = []
    nodes = data.get("nodes")
    if nodes is not None:
        ok = isinstance(nodes, list) and all(
            isinstance(n, dict) and _is_int(n.get("rank")) and isinstance(n.get("address"), str)
            and _ADDRESS.match(n["address"]) for n in nodes)
        if not ok:
            problems.append(f"{src}: nodes: must be a list of {{\"rank\": int, \"address\": host or IP}}")
        elif sorted(n["rank"] for n in nodes) != list(range(len(nodes))):
            problems.append(f"{src}: nodes: ranks must be 0..{len(nodes) - 1}, each once")
    for key in ("node_rank", "master_port"):
        value = data.get(key)
        if value is not None and (not _is_int(value) or value < 0 or (key == "master_port" and not 0 < value < 65536)):
            problems.append(f"{src}: {key}: must be a {'port number' if key == 'master_port' else 'non-negative integer'}")
    addr = data.get("master_addr")
    if addr is not None and not (isinstance(addr, str) and _ADDRESS.match(addr)):
        problems.append(f"{src}: master_addr: must be a host name or IP address")
    return problems
