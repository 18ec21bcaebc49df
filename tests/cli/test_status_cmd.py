"""`launchpad status` on a state with many jobs, on SQLite and PostgreSQL (the `state_url` fixture): the live
jobs and the 10 newest finished by default, a footer saying how many are hidden, `--all` for every job;
`--json` follows the same rule with the footer on stderr (stdout stays one JSON document)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from launchpad.cli import cli
from launchpad.state import StateDB
from launchpad.testing import timed
from launchpad.testing_state import fill_state


def run(*args: str):
    env = {"COLUMNS": "200", "AWS_EC2_METADATA_DISABLED": "true"}
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False, env=env)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture
def ids(state_url):
    db = StateDB.open()
    try:
        return fill_state(db, 250, live_every=50)  # 5 live jobs
    finally:
        db.close()


def test_default_shows_live_and_latest_finished(ids):
    live = [i for n, i in enumerate(ids) if n % 50 == 49]
    latest = [i for i in ids if i not in live][-10:]
    rows = json.loads(run("status", "--json").stdout)
    assert [r["id"] for r in rows] == sorted(live + latest)
    assert all(r["cost_usd"] > 0 and r["disk_usd"] > 0 for r in rows if r["id"] in latest)
    result = run("status")
    assert "235 older jobs hidden: `launchpad status --all`" in result.stdout
    assert ids[0] not in result.stdout and ids[-1] in result.stdout and live[0] in result.stdout


def test_all_shows_every_job(ids):
    rows = json.loads(run("status", "--all", "--json").stdout)
    assert [r["id"] for r in rows] == ids
    result = run("status", "--all")
    assert ids[0] in result.stdout and "hidden" not in result.stdout


def test_one_job_still_works(ids):
    rows = json.loads(run("status", ids[3], "--json").stdout)
    assert [r["id"] for r in rows] == [ids[3]]


def test_ten_thousand_jobs_answer_fast(state_url):
    db = StateDB.open()
    fill_state(db, 10_000, instances=2, events=3)
    db.close()
    run("status")  # warm: imports, plugin discovery
    with timed() as table:
        run("status")
    with timed() as as_json:
        rows = json.loads(run("status", "--json").stdout)
    assert len(rows) == 110
    # The target is 0.5 s (benchmarks/state_scale.py measures it). The CPU time is this process's share; the
    # wall-clock bound, with its margin, also covers the database server's.
    assert table.cpu < 1.0 and as_json.cpu < 1.0, (table, as_json)
    assert table.wall < 5 and as_json.wall < 5, (table, as_json)
