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
def db(tmp_path):
    return StateDB(tmp_path / "state.db")


def test_wal_mode_and_tables(db, tmp_path):
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
