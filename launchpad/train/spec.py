"""The trainer's view of the job spec: `launchpad.jobspec.JobSpec` (the one model and loader) with the
recipe typed and the instance paths as `Path`s. `python -m launchpad.train --spec job.json` starts here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInput
from ..jobspec import JobSpec as _Spec


@dataclass(frozen=True)
class TrainJob:
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
    def uses_deepspeed(self) -> bool:
        """A DeepSpeed config carried in the spec, or the recipe's file or preset."""
        return self.deepspeed_config is not None or bool(self.recipe.deepspeed)

    @property
    def output_dir(self) -> Path:
        """Where HF Trainer writes checkpoint-N folders (scratch; the store holds what counts)."""
        return self.workdir / "output"

    @property
    def save_now_flag(self) -> Path:
        """Touch this file to ask for a checkpoint at the next step end (checkpoint(), preemption)."""
        return self.workdir / "SAVE_NOW"

    @classmethod
    def load(cls, path: str | Path) -> TrainJob:
        """Read and check a job.json (through `launchpad.jobspec.JobSpec.load`). Raises BadInput."""
        return cls.from_spec(_Spec.load(path), source=str(path))

    @classmethod
    def from_spec(cls, spec: _Spec, *, source: str = "job spec") -> TrainJob:
        from ..recipe import Recipe

        try:
            recipe = Recipe.model_validate(dict(spec.recipe))
        except Exception as e:  # pydantic's ValidationError: keep it to its lines
            raise BadInput(f"{source}: recipe does not validate: {e}") from None
        assert spec.checkpoint_uri and spec.workdir and spec.status_path  # checked by JobSpec.load
        return cls(
            job_id=spec.job_id, recipe=recipe, recipe_json=dict(spec.recipe), checkpoint_uri=spec.checkpoint_uri,
            workdir=Path(spec.workdir), status_path=Path(spec.status_path), max_steps=spec.max_steps,
            nodes=tuple({"rank": n.rank, "address": n.address} for n in spec.nodes), node_rank=spec.node_rank,
            master_addr=spec.master_addr, master_port=spec.master_port,
            deepspeed_config=dict(spec.deepspeed_config) if spec.deepspeed_config is not None else None,
        )
