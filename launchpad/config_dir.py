"""Where launchpad's bundled configs live (``configs/``: catalog, provider facts, planner weights).

Order: ``$LAUNCHPAD_CONFIGS`` (a directory), then the ``configs/`` folder beside the package (a source
checkout or an editable install), then ``<prefix>/share/launchpad/configs`` (a wheel installed with data
files). Raises `ConfigError` naming every place it looked.
"""

from __future__ import annotations

import os
import sys
from functools import lru_cache
from pathlib import Path

from .errors import ConfigError


@lru_cache(maxsize=1)
def configs_dir() -> Path:
    """The bundled configs directory (contains providers.yaml, planner.yaml, catalog/)."""
    candidates = []
    if env := os.environ.get("LAUNCHPAD_CONFIGS"):
        candidates.append(Path(env).expanduser())
    candidates.append(Path(__file__).resolve().parent.parent / "configs")
    candidates.append(Path(sys.prefix) / "share" / "launchpad" / "configs")
    for path in candidates:
        if (path / "planner.yaml").is_file():
            return path
    looked = ", ".join(str(p) for p in candidates)
    raise ConfigError(f"cannot find launchpad's configs/ directory (looked in {looked})",
                      hint="set LAUNCHPAD_CONFIGS to the configs/ folder of a launchpad checkout")


def config_path(*parts: str) -> Path:
    """A file under the configs directory, e.g. ``config_path("catalog", "aws.csv")``."""
    return configs_dir().joinpath(*parts)
