"""launchpad's home is this user's only (issue 10, item 18): under the common umask 022 the state
database, saved logs and local instance workdirs used to be 0644 in 0755 folders."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest


@pytest.fixture
def umask_022():
    """The umask most systems give users; restored afterwards (launchpad tightens it on purpose)."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _readable_by_others(root: Path) -> list[str]:
    paths = [root, *root.rglob("*")]
    return [f"{p} {stat.filemode(p.lstat().st_mode)}" for p in paths
            if not p.is_symlink() and p.lstat().st_mode & 0o077]


def test_state_logs_and_local_workdir_are_private(launchpad_home, umask_022):
    """Item 18: the state DB with its -wal/-shm, logs saved under data_dir()/logs and a local
    instance's workdir files (instance.json, job spec, recipe) are 0600 in 0700 folders."""
    from launchpad_local import LocalProvider

    from launchpad.jobspec import JobSpec
    from launchpad.models import Bundle, InstanceSpec
    from launchpad.settings import data_dir
    from launchpad.state import StateDB

    provider = LocalProvider({})  # first, on its own: it must not rely on the state DB having been opened
    offer = provider.offers()[0]
    instance = provider.provision(offer, InstanceSpec(job_id="modes-1", token="modes-1-attempt-1"))
    spec = JobSpec(job_id="modes-1", recipe={"name": "modes"}, checkpoint_uri="file:///tmp/x")
    provider.sync(instance, Bundle(job_spec=spec, recipe_text="name: modes\n"))
    workdir = Path(instance.data["workdir"])
    assert {"instance.json", "recipe.yaml"} <= {p.name for p in workdir.iterdir()}
    assert _readable_by_others(launchpad_home) == []

    os.umask(0o022)
    db = StateDB.open()
    db.create_job("modes", None, JobSpec(job_id="modes-1", recipe={"name": "modes"}), "")
    assert {p.name for p in launchpad_home.iterdir()} >= {"state.db", "state.db-wal", "state.db-shm"}

    logs = data_dir() / "logs" / "modes-1"  # how the lifecycle saves a finished instance's log
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "local-x.log").write_text("step 1 loss 2.0\n")
    db.close()

    assert _readable_by_others(launchpad_home) == []


def test_cli_makes_an_older_home_private(run_cli, launchpad_home, umask_022):
    """Item 18: a home an older version left 0755 with a 0644 state.db is fixed by the next command."""
    from launchpad.state import StateDB

    os.umask(0o022)
    StateDB.open().close()
    os.chmod(launchpad_home, 0o755)
    os.chmod(launchpad_home / "state.db", 0o644)
    proc = run_cli("status", timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert stat.S_IMODE(launchpad_home.stat().st_mode) == 0o700
    assert stat.S_IMODE((launchpad_home / "state.db").stat().st_mode) == 0o600
    assert _readable_by_others(launchpad_home) == []
