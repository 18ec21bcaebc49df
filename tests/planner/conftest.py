"""Fixtures for the planner tests: recipes written to tmp_path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml


@pytest.fixture
def write_recipe(tmp_path: Path) -> Callable[..., Any]:
    """write_recipe(**fields) -> loaded Recipe. Defaults: an 8B QLoRA on a hub model, 100 steps."""
    from launchpad.recipe import load_recipe

    counter = iter(range(10_000))

    def make(resources: dict | None = None, **fields: Any):
        data: dict[str, Any] = {
            "name": "t8b", "base_model": "meta-llama/Meta-Llama-3-8B", "adapter": "qlora",
            "datasets": [{"path": "tatsu-lab/alpaca", "type": "alpaca"}], "sequence_len": 2048,
            "micro_batch_size": 1, "gradient_checkpointing": True, "max_steps": 100,
        }
        data.update(fields)
        if resources is not None:
            data["resources"] = resources
        path = tmp_path / f"recipe{next(counter)}.yaml"
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        return load_recipe(path)

    return make
