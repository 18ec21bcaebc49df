"""status.json: atomic writes, the loss history, the heartbeat, and what JobProgress reads from it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launchpad.models import JobProgress
from launchpad.train.status import MAX_LOSSES, StatusWriter


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def test_document_has_every_key_jobprogress_reads(tmp_path):
    path = tmp_path / "w" / "status.json"
    s = StatusWriter(path, "job-1")
    s.update(phase="training", total_steps=10)
    s.add_loss(1, 6.9, tokens_per_s=100.0, epoch=0.1)
    s.update(last_checkpoint={"step": 1, "uri": "file:///x/job-1/checkpoint-1"}, resumed_from={"step": 0, "uri": "u"})
    doc = read(path)
    assert set(doc) == {
        "job_id", "pid", "phase", "step", "total_steps", "epoch", "loss", "losses", "tokens_per_s",
        "last_checkpoint", "resumed_from", "heartbeat", "started_at", "finished", "error", "phase_times",
        "eval_loss", "eval_losses", "step_seconds",
    }
    s.mark("first_step")
    s.update(phase="saving")
    s.update(phase="training")  # phase_times keeps when each phase FIRST began
    doc = read(path)
    p = JobProgress.from_status(doc, running=True, exit_code=None)
    assert (p.phase, p.step, p.total_steps, p.loss, p.tokens_per_s) == ("training", 1, 10, 6.9, 100.0)
    times = p.phase_times
    assert set(times) == {"loading", "training", "first_step", "saving"}
    assert times["loading"] == doc["started_at"] <= times["training"] <= times["first_step"] <= times["saving"]
    assert p.last_checkpoint_step == 1 and p.last_checkpoint.endswith("checkpoint-1") and p.resumed_from_step == 0
    assert p.losses == ((1, 6.9),)
    assert [f.name for f in path.parent.iterdir()] == ["status.json"]  # no temp files left


def test_unknown_phase_is_a_bug(tmp_path):
    with pytest.raises(ValueError):
        StatusWriter(tmp_path / "s.json", "j").update(phase="running")


def test_losses_are_capped_and_a_rerun_step_replaces_newer_entries(tmp_path, monkeypatch):
    from launchpad.train import status

    assert MAX_LOSSES >= 1000
    monkeypatch.setattr(status, "MAX_LOSSES", 50)  # the same rule, fewer writes
    s = StatusWriter(tmp_path / "s.json", "j")
    for step in range(1, 61):
        s.add_loss(step, 1.0 / step)
    doc = s.doc
    assert len(doc["losses"]) == 50 and doc["losses"][0][0] == 11
    s.add_loss(50, 0.5)  # a resume from an earlier checkpoint logs that step again
    assert s.doc["losses"][-1] == [50, 0.5] and s.doc["losses"][-2][0] == 49
    assert s.doc["step"] == 50


def test_heartbeat_thread_rewrites_the_file(tmp_path):
    path = tmp_path / "s.json"
    s = StatusWriter(path, "j", interval=0.05).start()
    try:
        first = read(path)["heartbeat"]
        deadline = time.monotonic() + 5
        while read(path)["heartbeat"] == first:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        s.stop()
    assert read(path)["pid"] > 0


def test_losses_logged_faster_than_the_gap_reach_the_file_within_it(tmp_path):
    path = tmp_path / "s.json"
    s = StatusWriter(path, "j", interval=30, loss_gap=0.3).start()
    try:
        for step in range(1, 101):  # far faster than one write per 0.3 s
            s.add_loss(step, 1.0 / step)
        on_disk = read(path)["losses"]
        assert len(on_disk) < 100  # not rewritten for every step
        deadline = time.monotonic() + 5
        while len(read(path)["losses"]) < 100:  # the heartbeat thread writes the newest within the gap
            assert time.monotonic() < deadline, "the last losses never reached the file"
            time.sleep(0.05)
        s.add_loss(101, 0.01)
    finally:
        s.stop()  # writes what still waits
    doc = read(path)
    assert doc["step"] == 101 and doc["losses"][-1] == [101, 0.01] and len(doc["losses"]) == 101
