"""launchpad.phases: a job's start-up phases from the events a real state DB holds."""

from __future__ import annotations

from pathlib import Path

from launchpad.jobspec import JobSpec
from launchpad.phases import PHASES, phase_times, record_agent_phases, sync_facts
from launchpad.state import StateDB


def new_db(tmp_path: Path, job_id: str = "j-1") -> StateDB:
    db = StateDB(tmp_path / "state.db")
    spec = JobSpec.from_json({"job_id": job_id, "recipe": {"name": "j", "base_model": "builtin:tiny-llama"}})
    db.create_job("j", None, spec, "")
    return db


def add(db: StateDB, kind: str, ts: float, **data) -> None:
    db.add_event("j-1", kind, data)
    db._tx("UPDATE events SET ts = ? WHERE seq = ?", (ts, db.last_event_seq("j-1")))  # a deterministic clock


def test_every_phase_from_the_lifecycle_and_agent_events(tmp_path):
    db = new_db(tmp_path)
    add(db, "attempt", 100.0)
    add(db, "provision:attempt", 100.5, offer="a", token="t")
    add(db, "provision:ok", 103.0, offer="a", instance="i")
    add(db, "synced", 110.0, phases={"reachable": [103.1, 104.0], "sync": [104.0, 105.0], "environment": [105.0, 109.5]},
        venv="installed", installer="uv 0.13.9", source="cache", env_seconds={"install": 3.0})
    times = {"starting": 110.2, "prewarm": 110.3, "prewarm_done": 111.0, "trainer_start": 111.1, "loading": 111.2,
             "training": 115.0, "first_step": 115.5}
    record_agent_phases(db, "j-1", times, {})
    out = phase_times(db.events("j-1"))
    assert [p for p in PHASES if p in out] == list(PHASES)
    assert {p: out[p]["seconds"] for p in PHASES} == {
        "provision": 2.5, "reachable": 0.9, "sync": 1.0, "environment": 4.5, "launch": 0.7, "prewarm": 0.7,
        "loading": 3.9, "first_step": 0.5}
    assert out["total"] == {"start": 100.0, "end": 115.5, "seconds": 15.5}
    assert out["environment_detail"]["source"] == "cache"


def test_agent_phases_are_recorded_once_per_change_and_across_processes(tmp_path):
    db = new_db(tmp_path)
    seen: dict = {}
    record_agent_phases(db, "j-1", {"starting": 1.0, "prewarm": 2.0, "heartbeat": 9.0}, seen)
    record_agent_phases(db, "j-1", {"starting": 1.0, "prewarm": 2.0}, seen)  # a poll with nothing new
    record_agent_phases(db, "j-1", {"starting": 1.0, "prewarm": 2.0}, {})  # another process: reads the DB first
    record_agent_phases(db, "j-1", {"starting": 1.0, "prewarm": 2.0, "first_step": 3.0}, seen)
    recorded = [e["data"]["times"] for e in db.events("j-1") if e["kind"] == "agent:phases"]
    assert recorded == [{"starting": 1.0, "prewarm": 2.0}, {"starting": 1.0, "prewarm": 2.0, "first_step": 3.0}]


def test_the_newest_run_counts_and_partial_runs_show_what_is_known(tmp_path):
    db = new_db(tmp_path)
    add(db, "attempt", 10.0)
    add(db, "provision:attempt", 10.0)
    add(db, "provision:ok", 11.0)
    record_agent_phases(db, "j-1", {"training": 20.0, "first_step": 21.0}, {})
    add(db, "auto-resume", 50.0)  # preempted: a new instance, its own phases
    add(db, "provision:attempt", 50.5)
    add(db, "provision:failed", 51.0)
    add(db, "provision:attempt", 51.0)
    add(db, "provision:ok", 54.0)
    out = phase_times(db.events("j-1"))
    assert out == {"provision": {"start": 50.5, "end": 54.0, "seconds": 3.5}}  # no first step yet in this run


def test_sync_facts_take_what_a_vm_provider_measured():
    class Provider:
        last_sync = {"phases": {"sync": [1.0, 2.0]}, "venv": "reused", "files": 3, "installer": "uv 0.13.9"}

    assert sync_facts(Provider()) == {"phases": {"sync": [1.0, 2.0]}, "venv": "reused", "installer": "uv 0.13.9"}
    assert sync_facts(object()) == {}
