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


# -- private files ---------------------------------------------------------------------------------
# launchpad's home holds recipes (their text, dataset and bucket names), job specs, trainer logs,
# checkpoints and the jobs database: this user's business only, also on a shared machine.
PRIVATE_UMASK = 0o077
_user_umask: int | None = None  # the umask before make_private tightened it


def make_private(*dirs: Path) -> None:
    """Create each of `dirs` (with parents) as 0700, chmod launchpad's home dirs that exist to 0700,
    and tighten this process's umask to 077.

    Why the umask rather than a chmod after each write: most files under the home are written by
    code we do not control (SQLite's -wal/-shm, transformers' checkpoint files, the agent's logs, HF
    caches), many of them in the agent and trainer processes started from here, which inherit the
    umask. Tightening only removes group/other bits, so it never widens anything. Files an older
    version left 0644 stay as they are, but inside a 0700 home nobody else can reach them; the
    database, which matters most, is chmod-ed by StateDB itself."""
    global _user_umask
    current = os.umask(PRIVATE_UMASK)
    os.umask(current | PRIVATE_UMASK)
    if _user_umask is None:
        _user_umask = current
    for home in {data_dir(), config_dir(), cache_dir()}:
        _chmod_dir(home)
    for d in dirs:
        d = Path(d)
        d.mkdir(parents=True, exist_ok=True)
        _chmod_dir(d)


def user_umask() -> int:
    """The user's own umask, from before make_private: for what launchpad writes for the user outside
    its home (an exported model that a server running as another user may have to read)."""
    if _user_umask is not None:
        return _user_umask
    current = os.umask(PRIVATE_UMASK)
    os.umask(current)
    return current


def create_private_file(path: Path, also: tuple[str, ...] = ()) -> None:
    """Create `path` (if missing) as 0600 in a private folder (see make_private); chmod it, and the
    siblings named by the suffixes in `also`, to 0600 when an older version made them 0644. For
    SQLite: it gives its -wal/-shm files the mode of the database file."""
    path = Path(path)
    make_private(path.parent)
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    for p in (path, *(path.with_name(path.name + suffix) for suffix in also)):
        try:
            if p.stat().st_mode & 0o077:
                p.chmod(0o600)
        except FileNotFoundError:
            pass


def _chmod_dir(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink() and path.stat().st_mode & 0o077:
            path.chmod(0o700)
    except PermissionError:  # not ours (e.g. a LAUNCHPAD_HOME owned by someone else): leave it
        pass


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
