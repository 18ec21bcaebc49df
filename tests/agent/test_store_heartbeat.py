"""The agent's heartbeat in the checkpoint store (launchpad.agent.store_heartbeat), on the file store."""

from __future__ import annotations

import time

from launchpad.agent.status import AgentStatus
from launchpad.agent.store_heartbeat import StoreHeartbeat, interval_seconds
from launchpad.jobspec import JobSpec
from launchpad.storage import open_store
from launchpad.storage.jobfiles import read_heartbeat


def _spec(tmp_path, uri: str | None) -> JobSpec:
    data = {"job_id": "hb-1", "recipe": {"name": "hb", "base_model": "x"}, "checkpoint_uri": uri,
            "autostop": {"idle_minutes": 7, "action": "terminate"}}
    return JobSpec.from_json(data)


def test_beats_on_phase_changes_and_at_the_end_with_the_idle_timer(tmp_path):
    store_uri = (tmp_path / "store").as_uri()
    status = AgentStatus(tmp_path / "work", "hb-1")
    running = [False]
    beat = StoreHeartbeat(_spec(tmp_path, store_uri), status, lambda: running[0], interval=60).start()
    store = open_store(store_uri)
    try:
        first = read_heartbeat(store, "hb-1")
        assert first and first["phase"] == "starting" and first["trainer_running"] is False
        assert first["idle_since"] is None  # starting is busy, not idle
        assert first["autostop_idle_minutes"] == 7 and first["autostop_action"] == "terminate"
        running[0] = True
        status.set(phase="training")
        deadline = time.monotonic() + 10
        while not (read_heartbeat(store, "hb-1") or {}).get("trainer_running") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert read_heartbeat(store, "hb-1")["trainer_running"] is True  # a change is written at once
        running[0] = False
        status.set(phase="done")
    finally:
        beat.stop()
    last = read_heartbeat(store, "hb-1")
    assert last["phase"] == "done" and last["trainer_running"] is False
    assert last["idle_since"] is not None and abs(last["idle_since"] - time.time()) < 30
    assert last["job_id"] == "hb-1" and last["ts"] > first["ts"]


def test_a_store_error_never_raises(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")  # the store's root is a file: every write fails
    status = AgentStatus(tmp_path / "work", "hb-1")
    said: list[str] = []
    beat = StoreHeartbeat(_spec(tmp_path, blocker.as_uri()), status, lambda: False, interval=0.2, log=said.append)
    beat.start()
    time.sleep(0.5)
    beat.stop()
    assert beat.writes == 0 and beat.last_error
    assert len(said) == 1 and "heartbeat to the store failed" in said[0]  # said once, not every beat


def test_interval_from_the_environment(monkeypatch):
    monkeypatch.setenv("LAUNCHPAD_STORE_HEARTBEAT_SECONDS", "0.5")
    assert interval_seconds() == 0.5
    monkeypatch.setenv("LAUNCHPAD_STORE_HEARTBEAT_SECONDS", "nonsense")
    assert interval_seconds() == 30.0
