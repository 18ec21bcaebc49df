"""The per-job locks on both backends: flock files (launchpad.joblock) and PostgreSQL advisory locks
(launchpad.joblock_pg): a second process is refused the attempt lock, `attempt_held` sees it, and a
process that dies releases it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from launchpad.errors import JobBusy

HOLDER = """
import sys
from pathlib import Path
url = sys.argv[1]
if url.startswith("postgresql://"):
    from launchpad.joblock_pg import PgJobLocks
    locks = PgJobLocks(url)
else:
    from launchpad.joblock import JobLocks
    locks = JobLocks(Path(url))
with locks.attempt("job-1"):
    print("held", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture(params=["flock", "postgresql"])
def locks_target(request, tmp_path) -> str:
    """What a process needs to open the job locks: the lock folder, or the database's URL."""
    return str(tmp_path / "locks") if request.param == "flock" else request.getfixturevalue("postgres_url")


def open_locks(target: str):
    if target.startswith("postgresql://"):
        from launchpad.joblock_pg import PgJobLocks

        return PgJobLocks(target)
    from pathlib import Path

    from launchpad.joblock import JobLocks

    return JobLocks(Path(target))


def test_a_second_process_gets_jobbusy_until_the_first_dies(locks_target):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, locks_target], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        locks = open_locks(locks_target)
        assert locks.attempt_held("job-1") and not locks.attempt_held("job-2")
        with pytest.raises(JobBusy):
            with locks.attempt("job-1"):
                pass
        with locks.attempt("job-2"):  # other jobs are not affected
            pass
    finally:
        holder.kill()  # killed, not released: the kernel / the server lets go of its locks
        holder.wait()
    from launchpad.testing_postgres import wait_until

    assert wait_until(lambda: not locks.attempt_held("job-1"), timeout=10)
    with locks.attempt("job-1"):
        assert locks.attempt_held("job-1")  # held by this process counts too
        with locks.attempt("job-1"):  # re-entrant in the process (auto-resume inside `up`)
            pass
        assert locks.attempt_held("job-1")
    assert not locks.attempt_held("job-1")


def test_step_waits_bounded(locks_target):
    import time

    a, b = open_locks(locks_target), open_locks(locks_target)
    with a.step("job-1"):
        start = time.monotonic()
        with pytest.raises(JobBusy):
            with b.step("job-1", timeout=0.3):
                pass
        assert 0.25 < time.monotonic() - start < 5
        with b.step("job-2", timeout=0.3):
            pass
    with b.step("job-1", timeout=0.3):
        pass


def test_the_state_picks_its_locks(tmp_path, postgres_url):
    from launchpad.joblock import JobLocks
    from launchpad.joblock_pg import PgJobLocks
    from launchpad.state import StateDB
    from launchpad.state_pg import PostgresStateDB

    assert type(StateDB(tmp_path / "s.db").job_locks()) is JobLocks
    assert isinstance(PostgresStateDB(postgres_url).job_locks(), PgJobLocks)
