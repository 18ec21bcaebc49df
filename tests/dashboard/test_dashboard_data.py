"""launchpad.dashboard.data and the read-only state it opens: the database itself refuses writes (SQLite
and PostgreSQL), a state that does not exist yet reads as empty and is not created, and JSON never
carries NaN (a diverged run's loss)."""

from __future__ import annotations

import json
import math

import pytest

from launchpad.dashboard.data import DashboardData, clean
from launchpad.errors import StateError
from launchpad.state import StateDB
from launchpad.testing_state import fill_state


def test_the_read_only_state_refuses_writes_on_both_backends(state_url, launchpad_home):
    db = StateDB.open()
    (job_id,) = fill_state(db, 1, events=2)
    db.close()
    ro = StateDB.open(readonly=True)
    assert ro.job(job_id).id == job_id and len(list(ro.events(job_id))) == 2
    with pytest.raises(StateError):
        ro.add_event(job_id, "written-by-a-viewer")
    ro.close()
    assert len(list(StateDB.open().events(job_id))) == 2


def test_a_missing_state_reads_as_no_jobs_and_is_not_created(launchpad_home):
    data = DashboardData()
    assert data.jobs()["jobs"] == []
    data.close()
    assert not (launchpad_home / "state.db").exists() and list(launchpad_home.iterdir()) == []


def test_the_job_list_leaves_the_curves_out_and_json_has_no_nan(launchpad_home):
    db = StateDB.open()
    ids = fill_state(db, 3)
    db.close()
    data = DashboardData()
    listed = data.jobs()
    assert [j["id"] for j in listed["jobs"]] == ids[::-1]  # newest first
    assert all("losses" not in j for j in listed["jobs"])
    assert data.job(ids[0])["events"] and data.job(ids[0])["checkpoints"] == []
    data.close()
    doc = clean({"loss": math.nan, "losses": [[1, 6.9], [2, math.inf]], "eval": (math.nan,)})
    assert json.loads(json.dumps(doc, allow_nan=False)) == {"loss": None, "losses": [[1, 6.9], [2, None]], "eval": [None]}
