"""The job spec: the one JSON file that tells `python -m launchpad.train` what to do.

    {"job_id": "smoke-lora-3f9a1c",
     "recipe": <Recipe.model_dump(mode="json")>,   # local paths already absolute
     "checkpoint_uri": "file:///abs/checkpoints",   # store ROOT; this job's checkpoints go under <root>/<job_id>/
     "workdir": "/abs/instance/dir",               # scratch: model cache, local HF output_dir, downloads
     "status_path": "/abs/instance/dir/status.json",
     "max_steps": null,                            # optional; wins over recipe.max_steps (`up --smoke`)
     # optional, multi-node (resources.nodes > 1): every node gets the same list; its own rank too
     "nodes": [{"rank": 0, "address": "10.0.0.5"}, {"rank": 1, "address": "10.0.0.6"}],
     "node_rank": 0, "master_addr": "10.0.0.5", "master_port": 29500,
     # optional: the DeepSpeed config itself (the recipe's path is the client's; this travels with the job)
     "deepspeed_config": {...}}

Written by the lifecycle code on the client, read on the instance. Only this module knows its shape.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInput

_JOB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class JobSpec:
    job_id: str
    recipe: Any  # launchpad.recipe.Recipe
    recipe_json: dict[str, Any]
    checkpoint_uri: str
    workdir: Path
    status_path: Path
    max_steps: int | None = None
    nodes: tuple[dict[str, Any], ...] = ()
    node_rank: int | None = None
    master_addr: str | None = None
    master_port: int | None = None
    deepspeed_config: dict[str, Any] | None = None

    @property
    def env_path(self) -> Path:
        """env.json: versions and devices recorded by the environment check (the agent reads it)."""
        return self.workdir / "env.json"

    @property
    def recipe_hash(self) -> str:
        """Identifies the recipe a checkpoint was trained with (recorded in each manifest)."""
        from ..recipe import recipe_hash

        return recipe_hash(self.recipe)

    @property
    def total_steps_override(self) -> int | None:
        return self.max_steps if self.max_steps is not None else self.recipe.max_steps

    @property
    def output_dir(self) -> Path:
        """Where HF Trainer writes checkpoint-N folders (scratch; the store holds what counts)."""
        return self.workdir / "output"

    @property
    def save_now_flag(self) -> Path:
        """Touch this file to ask for a checkpoint at the next step end (checkpoint(), preemption)."""
        return self.workdir / "SAVE_NOW"

    @classmethod
    def load(cls, path: str | Path) -> "JobSpec":
        """Read and check a spec file. Raises BadInput with one line per problem."""
        from ..recipe import Recipe

        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BadInput(f"job spec {path} does not exist") from None
        except (OSError, ValueError) as e:
            raise BadInput(f"job spec {path} is not readable JSON: {e}") from None
        if not isinstance(data, dict):
            raise BadInput(f"job spec {path} is not a JSON object")
        problems = []
        for key in ("job_id", "checkpoint_uri", "workdir", "status_path"):
            if not isinstance(data.get(key), str) or not data[key]:
                problems.append(f"{path}: {key}: required, a non-empty string")
        if not isinstance(data.get("recipe"), dict):
            problems.append(f"{path}: recipe: required, an object (Recipe.model_dump(mode='json'))")
        if isinstance(data.get("job_id"), str) and not _JOB_ID.match(data["job_id"]):
            problems.append(f"{path}: job_id: letters, digits, '.', '_' and '-' only (it names store keys)")
        max_steps = data.get("max_steps")
        if max_steps is not None and (not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1):
            problems.append(f"{path}: max_steps: must be a positive integer or null (got {max_steps!r})")
        for key in ("workdir", "status_path"):
            if isinstance(data.get(key), str) and data[key] and not Path(data[key]).is_absolute():
                problems.append(f"{path}: {key}: must be an absolute path (got {data[key]!r})")
        problems += _multinode_problems(path, data)
        ds = data.get("deepspeed_config")
        if ds is not None and not isinstance(ds, dict):
            problems.append(f"{path}: deepspeed_config: must be an object or null")
        if problems:
            raise BadInput("\n".join(problems))
        try:
            recipe = Recipe.model_validate(data["recipe"])
        except Exception as e:  # pydantic's ValidationError: keep it to its lines
            raise BadInput(f"{path}: recipe does not validate: {e}") from None
        return cls(
            job_id=data["job_id"],
            recipe=recipe,
            recipe_json=data["recipe"],
            checkpoint_uri=data["checkpoint_uri"],
            workdir=Path(data["workdir"]),
            status_path=Path(data["status_path"]),
            max_steps=max_steps,
            nodes=tuple(data.get("nodes") or ()),
            node_rank=data.get("node_rank"),
            master_addr=data.get("master_addr"),
            master_port=data.get("master_port"),
            deepspeed_config=data.get("deepspeed_config"),
        )


_ADDRESS = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")  # a host name, IPv4 or IPv6 address


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _multinode_problems(path: Path, data: dict[str, Any]) -> list[str]:
    """Checks of the optional multi-node keys; addresses end up in a launcher's argv and a hostfile."""
    problems = []
    nodes = data.get("nodes")
    if nodes is not None:
        ok = isinstance(nodes, list) and all(
            isinstance(n, dict) and _is_int(n.get("rank")) and isinstance(n.get("address"), str)
            and _ADDRESS.match(n["address"]) for n in nodes)
        if not ok:
            problems.append(f"{path}: nodes: must be a list of {{\"rank\": int, \"address\": host or IP}}")
        elif sorted(n["rank"] for n in nodes) != list(range(len(nodes))):
            problems.append(f"{path}: nodes: ranks must be 0..{len(nodes) - 1}, each once")
    for key in ("node_rank", "master_port"):
        value = data.get(key)
        if value is not None and (not _is_int(value) or value < 0 or (key == "master_port" and not 0 < value < 65536)):
            problems.append(f"{path}: {key}: must be a {'port number' if key == 'master_port' else 'non-negative integer'}")
    addr = data.get("master_addr")
    if addr is not None and not (isinstance(addr, str) and _ADDRESS.match(addr)):
        problems.append(f"{path}: master_addr: must be a host name or IP address")
    return problems
