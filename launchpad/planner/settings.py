"""The planner's bundled settings: ``configs/planner.yaml`` (weights, estimate assumptions, GPU table)
and ``configs/providers.yaml`` (provider facts with sources). Loaded once per process."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..config_dir import config_path
from ..errors import ConfigError


def _load_yaml(name: str) -> dict[str, Any]:
    import yaml

    path = config_path(name)
    try:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return data


@lru_cache(maxsize=1)
def planner_settings() -> dict[str, Any]:
    return _load_yaml("planner.yaml")


@lru_cache(maxsize=1)
def provider_facts() -> dict[str, Any]:
    """``{provider: {fact: value, ..., "instances": {glob: {fact: value}}}}``; `sources` entries are kept."""
    return _load_yaml("providers.yaml").get("providers", {})


def gpu_info(name: str | None) -> dict[str, Any]:
    """The GPU table's row for a canonical GPU name ({} when unknown)."""
    if not name:
        return {}
    return planner_settings()["gpus"].get(name, {})
