"""The job spec: the one JSON file that tells `python -m launchpad.train` what to do.

    {"job_id": "smoke-lora-3f9a1c",
     "recipe": <Recipe.model_dump(mode="json")>,   # local paths already absolute
     "checkpoint_uri": "file:///abs/checkpoints",   # store ROOT; this job's checkpoints go under <root>/<job_id>/
     "workdir": "/abs/instance/dir",               # scratch: model cache, local HF output_dir, downloads
     "status_path": "/abs/instance/dir/status.json",
     "max_steps": null}                            # optional; wins over recipe.max_steps (`up --smoke`)

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
        )
