"""Every test runs with its own LAUNCHPAD_HOME, offline, and may only open sockets to loopback
(pytest-socket's --allow-hosts in pyproject.toml): an SDK that leaks to a real endpoint fails loudly."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Under pytest-xdist (pyproject's `-n auto`), each worker's torch, and every trainer it starts, uses its share
# of the cores. OpenMP's default of one thread per core in every worker oversubscribes them, and its threads
# spin while they wait: with 4 workers on 2 cores a 14 s training test took over 240 s.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    _share = max(1, (os.cpu_count() or 1) // _WORKERS)
    os.environ.setdefault("OMP_NUM_THREADS", str(_share))
    os.environ.setdefault("MKL_NUM_THREADS", str(_share))

# Fixtures that start a server, by the marker that selects their tests (`-m "not sshd and not object_store"`
# leaves them out). `any_store[file]` starts nothing: only its s3/gs/az cases are object_store tests.
SERVER_FIXTURES = {
    "sshd": {"launchpad_sshd", "sshd_pair", "sshd_nosftp", "lone_sshd"},
    "object_store": {"s3_server", "gcs_server", "azurite_server", "server_env"},
    "postgres": {"postgres_server", "postgres_url"},
}


def _starts(item: pytest.Item, fixtures: set[str]) -> bool:
    names = set(getattr(item, "fixturenames", ()))
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "postgresql" in callspec.params.values():
        names.add("postgres_url")  # state_db[postgresql], state_url[postgresql]...: asked for when they run
    if callspec is not None and callspec.params.get("any_store") == "file":
        names.discard("server_env")  # requested by any_store, which on file:// starts no server
        function = getattr(item, "function", None)
        if function is not None and "server_env" in inspect.signature(function).parameters:
            names.add("server_env")  # ... unless the test asks for it itself
    return bool(names & fixtures)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker, fixtures in SERVER_FIXTURES.items():
            if _starts(item, fixtures):
                item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(autouse=True)
def _isolated_home(launchpad_home):
    yield launchpad_home


@pytest.fixture(scope="session")
def postgres_server():
    """A throwaway PostgreSQL server for the session (launchpad.testing_postgres). Missing binaries or
    psycopg fail the tests that need it (CI must install them: .ci/run); LAUNCHPAD_TEST_NO_POSTGRES=1
    skips them instead, on a laptop without PostgreSQL."""
    from launchpad.testing_postgres import PostgresServer, postgres_bin_dir

    if os.environ.get("LAUNCHPAD_TEST_NO_POSTGRES") == "1":
        pytest.skip("LAUNCHPAD_TEST_NO_POSTGRES=1")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.fail("psycopg is not installed: pip install -e '.[dev]' (or LAUNCHPAD_TEST_NO_POSTGRES=1 to skip)")
    if postgres_bin_dir() is None:
        pytest.fail("PostgreSQL is not installed: apt-get install postgresql (or LAUNCHPAD_TEST_NO_POSTGRES=1 to skip)")
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """A fresh, empty database of the session's server, for one test."""
    return postgres_server.create_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def state_db(request, tmp_path):
    """The state backends' conformance: the test runs on a SQLite file and on a PostgreSQL database."""
    from launchpad.state import StateDB

    if request.param == "sqlite":
        db = StateDB(tmp_path / "state.db")
    else:
        from launchpad.state_pg import PostgresStateDB

        db = PostgresStateDB(request.getfixturevalue("postgres_url"))
    yield db
    db.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def state_url(request, monkeypatch, launchpad_home) -> str:
    """LAUNCHPAD_STATE_URL for the CLI on each backend (the SQLite file under LAUNCHPAD_HOME)."""
    url = (f"sqlite:///{launchpad_home / 'state.db'}" if request.param == "sqlite"
           else request.getfixturevalue("postgres_url"))
    monkeypatch.setenv("LAUNCHPAD_STATE_URL", url)
    return url


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
