import sqlite3
import time

import pytest

from launchpad.errors import JobNotFound
from launchpad.models import Instance, InstanceState, JobState, Offer
from launchpad.state import StateDB


@pytest.fixture
def db(tmp_path):
    return StateDB(tmp_path / "state.db")


def test_wal_mode_and_tables(db, tmp_path):
    conn = sqlite3.connect(tmp_path / "state.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"jobs", "instances", "events"} <= tables


def test_every_transition_is_an_event(db):
    db.create_job("demo-abc123", "demo", "r.yaml", {"name": "demo"}, {"job_id": "demo-abc123"})
    for state in (JobState.PROVISIONING, JobState.SYNCING, JobState.TRAINING, JobState.SUCCEEDED):
        db.set_state("demo-abc123", state)
    kinds = [e["kind"] for e in db.events("demo-abc123")]
    assert kinds == ["created", "state:PROVISIONING", "state:SYNCING", "state:TRAINING", "state:SUCCEEDED"]
    assert db.job("demo-abc123")["state"] is JobState.SUCCEEDED


def test_lookup_by_prefix_and_name(db):
    db.create_job("demo-abc123", "demo", None, {}, {})
    assert db.job("demo-ab")["id"] == "demo-abc123"
    assert db.job("demo")["id"] == "demo-abc123"
    with pytest.raises(JobNotFound):
        db.job("nope")
    with pytest.raises(JobNotFound):
        db.job("%")  # LIKE wildcards are escaped


def test_instances_and_cost(db):
    db.create_job("j-1", "j", None, {}, {})
    offer = Offer(provider="p", instance_type="t", region="r", price_per_hour=3.6)
    inst = Instance(provider="p", id="i-1", job_id="j-1", state=InstanceState.RUNNING, offer=offer,
                    created_at=time.time() - 100)
    db.record_instance(inst)
    assert [i.id for i in db.instances("j-1", live_only=True)] == ["i-1"]
    assert 0.09 < db.cost_so_far("j-1") < 0.2
    db.set_instance_state(inst, InstanceState.TERMINATED)
    assert db.instances("j-1", live_only=True) == []
