"""PostgreSQL state (launchpad.state_pg): migrations applied once even by processes starting together, and
one clear line, never the password, for a bad LAUNCHPAD_STATE_URL."""

from __future__ import annotations

import subprocess
import sys

import pytest

from launchpad.errors import StateError
from launchpad.state import StateDB
from launchpad.state_pg import MIGRATIONS, PostgresStateDB, scrub


def versions(url: str) -> list[int]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [r[0] for r in conn.execute("SELECT version FROM schema_version ORDER BY version")]


def test_migrations_apply_once(postgres_url):
    PostgresStateDB(postgres_url).close()
    db = PostgresStateDB(postgres_url)  # a second open finds nothing to do
    assert versions(postgres_url) == [m[0] for m in MIGRATIONS]
    assert db.count_jobs() == 0


def test_processes_starting_together_migrate_once(postgres_url):
    """Four processes open a fresh database at the same moment: the advisory lock lets one migrate; the
    others wait for it and find the schema done (without it, CREATE TABLE races fail one of them)."""
    code = ("import sys, time; from launchpad.state_pg import PostgresStateDB\n"
            "t = float(sys.argv[2]); time.sleep(max(0, t - time.time()))\n"
            "PostgresStateDB(sys.argv[1]).close(); print('ok')")
    import time

    at = str(time.time() + 3)  # after every interpreter has started
    procs = [subprocess.Popen([sys.executable, "-c", code, postgres_url, at], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, results
    assert versions(postgres_url) == [m[0] for m in MIGRATIONS]


def test_a_newer_schema_is_refused(postgres_url):
    import psycopg

    PostgresStateDB(postgres_url).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_version VALUES (999, 'from the future', 0)")
    with pytest.raises(StateError, match="newer than this launchpad knows"):
        PostgresStateDB(postgres_url)


def test_unknown_scheme(monkeypatch):
    monkeypatch.setenv("LAUNCHPAD_STATE_URL", "mysql://me:hunter2@db.example/launchpad")
    with pytest.raises(StateError) as e:
        StateDB.open()
    assert "hunter2" not in str(e.value) and "not a state URL" in str(e.value)


def test_wrong_password_and_unreachable_server(postgres_server):
    postgres_server.add_password_user("pw_user", "right-one")
    bad = postgres_server.url(user="pw_user", password="wrong-one-pw")
    with pytest.raises(StateError) as e:
        PostgresStateDB(bad)
    message = str(e.value)
    assert "password authentication failed" in message and "wrong-one-pw" not in message
    assert "\n" not in message
    PostgresStateDB(postgres_server.url(user="pw_user", password="right-one")).close()
    with pytest.raises(StateError) as e:
        PostgresStateDB("postgresql://u:sekrit-pw@127.0.0.1:1/x")  # nothing listens on port 1
    assert "sekrit-pw" not in str(e.value) and "127.0.0.1:1/x" in str(e.value)


def test_a_bad_state_url_exits_1_with_one_line(monkeypatch, capsys):
    from launchpad.cli import main

    monkeypatch.setenv("LAUNCHPAD_STATE_URL", "postgresql://u:sekrit-pw@127.0.0.1:1/x")
    with pytest.raises(SystemExit) as e:
        main(["status"])
    err = capsys.readouterr().err
    assert e.value.code == 1 and "sekrit-pw" not in err and "error:" in err


def test_scrub_masks_a_password_the_driver_repeats():
    assert scrub("bad option password=abc in x\nmore", "host=h password=abc") == "bad option password=*** in x"
    assert scrub("oops sekrit", "postgresql://u:sekrit@h/db") == "oops ***"


def test_without_psycopg_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg -> ImportError
    monkeypatch.setenv("LAUNCHPAD_STATE_URL", "postgresql://u:pw@db.example/launchpad")
    with pytest.raises(StateError) as e:
        StateDB.open()
    assert "psycopg is not installed" in str(e.value) and "launchpad[postgres]" in (e.value.hint or "")
