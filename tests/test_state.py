"""The state backends' conformance: every test that takes `db` runs on SQLite and on PostgreSQL (the
`state_db` fixture, tests/conftest.py); the SQLite file's own upgrades are tested at the end."""

import sqlite3
import time

import pytest

from launchpad.errors import JobNotFound
from launchpad.jobspec import JobSpec
from launchpad.models import Instance, InstanceState, JobState, Offer
from launchpad.state import JobOptions, StateDB


def add_job(db, job_id, name, recipe_path=None, **options):
    db.create_job(name, recipe_path, JobSpec(job_id=job_id, recipe={"name": name}), "name: x\n", JobOptions(**options))


@pytest.fixture
def db(state_db):
    return state_db


def test_wal_mode_and_tables(tmp_path):
    StateDB(tmp_path / "state.db")
    conn = sqlite3.connect(tmp_path / "state.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"jobs", "instances", "events"} <= tables


def test_every_transition_is_an_event(db):
    add_job(db, "demo-abc123", "demo", "r.yaml")
    for state in (JobState.PROVISIONING, JobState.SYNCING, JobState.TRAINING, JobState.SUCCEEDED):
        db.set_state("demo-abc123", state)
    kinds = [e["kind"] for e in db.events("demo-abc123")]
    assert kinds == ["created", "state:PROVISIONING", "state:SYNCING", "state:TRAINING", "state:SUCCEEDED"]
    assert db.job("demo-abc123").state is JobState.SUCCEEDED


def test_lookup_by_prefix_and_name(db):
    add_job(db, "demo-abc123", "demo")
    assert db.job("demo-ab").id == "demo-abc123"
    assert db.job("demo").id == "demo-abc123"
    with pytest.raises(JobNotFound):
        db.job("nope")
    with pytest.raises(JobNotFound):
        db.job("%")  # LIKE wildcards are escaped


def test_instances_and_cost(db):
    add_job(db, "j-1", "j")
    offer = Offer(provider="p", instance_type="t", region="r", price_per_hour=3.6)
    inst = Instance(provider="p", id="i-1", job_id="j-1", state=InstanceState.RUNNING, offer=offer,
                    created_at=time.time() - 100)
    db.record_instance(inst)
    assert [i.id for i in db.instances("j-1", live_only=True)] == ["i-1"]
    assert 0.09 < db.cost_so_far("j-1") < 0.2
    db.set_instance_state(inst, InstanceState.TERMINATED)
    assert db.instances("j-1", live_only=True) == []


def test_job_row_is_typed_and_spec_round_trips(db):
    """The typed row: spec, recipe text and client options come back as they went in."""
    add_job(db, "t-1", "t", "r.yaml", only_provider="ssh", minimize="time")
    job = db.job("t-1")
    assert job.spec == JobSpec(job_id="t-1", recipe={"name": "t"})
    assert job.recipe_text == "name: x\n" and job.options == JobOptions("ssh", "time")
    db.update_spec(job.spec.replace(checkpoint_uri="s3://b/c"))
    assert db.job("t-1").spec.checkpoint_uri == "s3://b/c"


def test_an_older_state_file_gains_the_new_columns(tmp_path):
    """A state.db from before recipe_text/options_json: opened, migrated, its job still readable."""
    import json

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE jobs (id TEXT PRIMARY KEY, name TEXT NOT NULL, state TEXT NOT NULL, provider TEXT,"
        " recipe_path TEXT, recipe_json TEXT NOT NULL, spec_json TEXT NOT NULL, plan_json TEXT, step INTEGER"
        " DEFAULT 0, total_steps INTEGER, loss REAL, last_checkpoint TEXT, cost_usd REAL DEFAULT 0, error TEXT,"
        " created_at REAL NOT NULL, updated_at REAL NOT NULL);")
    spec = {"job_id": "old-1", "recipe": {"name": "old"}, "recipe_text": "name: old\n", "only_provider": "local",
            "minimize": "time", "checkpoint_uri": "file:///x"}
    conn.execute("INSERT INTO jobs (id, name, state, recipe_json, spec_json, created_at, updated_at)"
                 " VALUES ('old-1', 'old', 'SUCCEEDED', '{}', ?, 1, 1)", (json.dumps(spec),))
    conn.commit()
    conn.close()
    job = StateDB(path).job("old-1")
    assert job.recipe_text == "name: old\n" and job.options == JobOptions("local", "time")
    assert job.spec.checkpoint_uri == "file:///x"


def test_jobs_live_or_latest(db):
    """What `launchpad status` lists by default: the jobs not finished and the newest finished ones."""
    from launchpad.testing_state import fill_state

    ids = fill_state(db, 50, live_every=10)  # job-00009, -19, ... are live
    live = [i for n, i in enumerate(ids) if n % 10 == 9]
    shown = [j.id for j in db.jobs(live_or_latest=3)]
    finished_newest = [i for i in ids if i not in live][-3:]
    assert shown == sorted(live + finished_newest)  # oldest first, as jobs()
    assert [j.id for j in db.jobs(live_or_latest=0)] == live
    assert [j.id for j in db.jobs()] == ids and db.count_jobs() == 50


def test_instances_and_events_for_many_jobs(db):
    """One query for many jobs gives what the per-job reads give."""
    from launchpad.testing_state import fill_state

    ids = fill_state(db, 30, live_every=0, instances=2, events=3)
    spans = db.instances_for([*ids, "no-such-job"])
    assert set(spans) == set(ids) and all(len(s) == 2 for s in spans.values())
    assert [s.as_tuple() for s in spans[ids[4]]] == db.instance_spans(ids[4])
    assert db.cost_so_far(ids[4]) == pytest.approx(2 * 1.2 * 30 / 3600)
    events = db.events_for(ids)
    assert events[ids[7]] == list(db.events(ids[7])) and len(events[ids[7]]) == 3


def test_ten_thousand_jobs_are_listed_correctly(db):
    from launchpad.testing_state import fill_state

    ids = fill_state(db, 10_000, instances=1, events=1)
    listed = db.jobs()
    assert [j.id for j in listed] == ids and listed[123].spec.job_id == ids[123]
    assert db.count_jobs() == 10_000
    shown = db.jobs(live_or_latest=10)
    assert len(shown) == 100 + 10 and sum(not j.state.finished for j in shown) == 100
    assert [j.id for j in shown if j.state.finished] == [i for n, i in enumerate(ids) if n % 100 != 99][-10:]
    spans = db.instances_for(ids)  # 20 chunks of ids
    assert sum(len(s) for s in spans.values()) == 9_900
    assert db.job("job-09998").name == "run-9998"


def test_a_damaged_row_is_skipped_with_a_warning(db):
    add_job(db, "ok-1", "ok")
    add_job(db, "bad-1", "bad")
    db._tx("UPDATE jobs SET spec_json = ? WHERE id = ?", ("{not json", "bad-1"))
    assert [j.id for j in db.jobs()] == ["ok-1"] and [j.id for j in db.jobs(live_or_latest=5)] == ["ok-1"]
    assert any("bad-1" in w for w in db.warnings)


def test_timestamps_keep_sub_second_precision(db):
    """PostgreSQL's REAL is 4 bytes (it would round today's epoch to ~2 minutes): DOUBLE PRECISION there."""
    add_job(db, "t-1", "t")
    created = db.job("t-1").created_at
    assert abs(created - time.time()) < 60
    seq = db.last_event_seq("t-1")
    db._tx("UPDATE events SET ts = ? WHERE seq = ?", (1_700_000_000.125, seq))
    assert next(iter(db.events("t-1")))["ts"] == 1_700_000_000.125
