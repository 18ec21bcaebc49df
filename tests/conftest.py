"""Every test runs with its own LAUNCHPAD_HOME, offline, and may only open sockets to loopback
(pytest-socket's --allow-hosts in pyproject.toml): an SDK that leaks to a real endpoint fails loudly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolated_home(launchpad_home):
    yield launchpad_home


@pytest.fixture
def run_cli(launchpad_home):
    """Run the real `launchpad` CLI in a subprocess (as a user would) in the isolated home."""

    def run(*args: str, timeout: float = 300, check: bool = False, env: dict | None = None, cwd: Path = REPO):
        full_env = {**os.environ, "LAUNCHPAD_HOME": str(launchpad_home), "HF_HUB_OFFLINE": "1",
                    "COLUMNS": "200", **(env or {})}
        proc = subprocess.run([sys.executable, "-m", "launchpad", *args], capture_output=True, text=True,
                              timeout=timeout, env=full_env, cwd=cwd)
        if check and proc.returncode != 0:
            raise AssertionError(f"launchpad {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run
