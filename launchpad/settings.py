"""Where launchpad keeps things on the user's machine, and the user's own config.

`LAUNCHPAD_HOME`, when set, is the one root for state, config (config.yaml, hosts.yaml) and caches, so
tests and users can run isolated homes. Otherwise the platform's user dirs are used (platformdirs).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from .errors import ConfigError


def _home() -> Path | None:
    home = os.environ.get("LAUNCHPAD_HOME")
    return Path(home).expanduser().resolve() if home else None


def data_dir() -> Path:
    """State (jobs database), local instances, saved logs."""
    if (home := _home()) is not None:
        return home
    import platformdirs

    return Path(platformdirs.user_data_dir("launchpad", appauthor=False))


def config_dir() -> Path:
    """config.yaml (provider settings) and hosts.yaml."""
    if (home := _home()) is not None:
        return home
    import platformdirs

    return Path(platformdirs.user_config_dir("launchpad", appauthor=False))


def cache_dir() -> Path:
    """Re-creatable things: built models, parsed catalogs, wheels."""
    if (home := _home()) is not None:
        return home / "cache"
    import platformdirs

    return Path(platformdirs.user_cache_dir("launchpad", appauthor=False))


def state_url() -> str:
    return os.environ.get("LAUNCHPAD_STATE_URL") or f"sqlite:///{data_dir() / 'state.db'}"


def load_user_config() -> dict[str, Any]:
    """config.yaml: ``providers: {name: {...settings...}}`` and ``disable: [name, ...]``. Missing = empty."""
    path = config_dir() / "config.yaml"
    return _read_yaml_mapping(path)


_CONFIG_FIX = "fix or remove it; it holds `providers:` settings and a `disable:` list, see README"


@lru_cache(maxsize=8)
def _read_cached(path: str, mtime_ns: int, size: int) -> dict[str, Any]:
    # The same reader as recipes: a FIFO or a device here would hang every command, and an alias
    # bomb would be expanded by whoever walks the settings.
    from .yamlsafe import YamlError, parse_yaml, read_text

    try:
        data = parse_yaml(read_text(path))
    except YamlError as e:
        raise ConfigError(f"{path}: {'; '.join(e.problems)}", hint=_CONFIG_FIX) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a mapping of settings, not {type(data).__name__}", hint=_CONFIG_FIX)
    return data


def _read_yaml_mapping(path: Path) -> dict[str, Any]:
    try:
        st = path.stat()
    except FileNotFoundError:
        return {}
    except OSError as e:  # e.g. a path through a file: not worth a traceback
        raise ConfigError(f"{path}: cannot read it ({e.strerror or e})", hint=_CONFIG_FIX) from None
    return _read_cached(str(path), st.st_mtime_ns, st.st_size)
