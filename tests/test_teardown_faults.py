"""Teardown always wins, finished work stays finished (issue 10), on the embedded `local` provider with
the real CLI, agent and trainer, and faults caused for real by launchpad.testing_faults: `down` at a
chosen lifecycle point (a real plugin), a full tmpfs, a damaged state database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_lifecycle import instance_dirs, make_recipe, pid_running, popen_cli, status, trainer_pid, wait_for

from launchpad.testing_faults import damage_state_db, fault_log, full_disk, install_down_hook, processes_naming

pytestmark = pytest.mark.slow


def agent_pids(home: Path) -> list[int]:
    return processes_naming(home / "local" / "instances")


def assert_nothing_left(home: Path, job_id: str, run_cli) -> None:
    wait_for(lambda: not agent_pids(home), timeout=30, what="every agent and trainer to end")
    assert instance_dirs(home) == []
    again = json.loads(run_cli("down", job_id, "--json", check=True).stdout)
    assert again["terminated"] == [], "a second down finds nothing: nothing was left for it"


@pytest.mark.parametrize("at", ["state:SYNCING", "synced", "state:TRAINING"])
def test_down_during_up_leaves_nothing_running(run_cli, launchpad_home, tmp_path, at):
    """Items 1 and 17: `down` before the sync, between sync and train, and right after train. Before the
    fix: a FileNotFoundError traceback, or a job left TRAINING with `up` exiting 0 and a trainer running."""
    log = tmp_path / "faults.jsonl"
    env = install_down_hook(tmp_path / "site", at, log)
    recipe = make_recipe(tmp_path, "racer", max_steps=100000)
    proc = run_cli("up", str(recipe), env=env, timeout=240)
    (fault,) = fault_log(log)  # the hook's thread keeps `up` alive until its `down` has ended
    assert fault["rc"] == 0, fault
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "torn down by `launchpad down`" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    job = status(run_cli, fault["job"])
    assert job["state"] == "INTERRUPTED" and "launchpad down" in job["error"]
    assert_nothing_left(launchpad_home, fault["job"], run_cli)


def test_down_reconciles_a_finished_job_and_it_stays_finished(run_cli, launchpad_home, tmp_path):
    """Item 3: a job that finished while nobody watched (`up --detach`) is SUCCEEDED after `down`, not
    INTERRUPTED at step 0; `resume` then trains nothing and prunes nothing."""
    recipe = make_recipe(tmp_path, "finished", max_steps=6, checkpoint={"every_steps": 3, "keep": 5})
    job = json.loads(run_cli("up", str(recipe), "--detach", "--json", check=True).stdout)
    exit_files = lambda: [d / "trainer.exit" for d in instance_dirs(launchpad_home) if (d / "trainer.exit").exists()]  # noqa: E731
    wait_for(exit_files, timeout=180, what="the trainer to finish")
    wait_for(lambda: json.loads((exit_files()[0].parent / "status.json").read_text()).get("phase") == "done",
             timeout=60, what="the agent to report done")
    run_cli("down", job["id"], check=True)
    after = status(run_cli, job["id"])
    assert after["state"] == "SUCCEEDED" and after["step"] == 6, after
    store = launchpad_home / "checkpoints" / job["id"]
    before = sorted(p.name for p in store.iterdir())
    resumed = run_cli("resume", job["id"], check=True)
    assert "already succeeded" in resumed.stdout
    assert sorted(p.name for p in store.iterdir()) == before


def test_resume_at_the_last_step_trains_no_further(run_cli, launchpad_home, tmp_path):
    """Item 3: an INTERRUPTED job whose newest checkpoint is its last step becomes SUCCEEDED on `resume`
    (no "step 7/6", no new checkpoint, nothing pruned)."""
    recipe = make_recipe(tmp_path, "laststep", max_steps=6, checkpoint={"every_steps": 3, "keep": 5})
    run_cli("up", str(recipe), check=True, timeout=240)
    (job,) = status(run_cli)
    from launchpad.models import JobState
    from launchpad.state import StateDB

    db = StateDB.open()  # as a crash after the last checkpoint would leave it
    db.set_state(job["id"], JobState.INTERRUPTED, error="the client crashed")
    db.close()
    store = launchpad_home / "checkpoints" / job["id"]
    before = sorted(p.name for p in store.iterdir())
    proc = run_cli("resume", job["id"], check=True)
    assert "already reached its last step (checkpoint-6)" in proc.stdout
    assert status(run_cli, job["id"])["state"] == "SUCCEEDED"
    assert sorted(p.name for p in store.iterdir()) == before and instance_dirs(launchpad_home) == []


def test_two_concurrent_resumes_run_the_job_once(run_cli, launchpad_home, tmp_path):
    """Item 5: one job = at most one live attempt. The second `resume` is refused while the first runs."""
    recipe = make_recipe(tmp_path, "twice", max_steps=100000)
    job = json.loads(run_cli("up", str(recipe), "--detach", "--json", check=True).stdout)
    wait_for(lambda: trainer_pid(launchpad_home), what="the trainer to start")
    run_cli("down", job["id"], check=True)
    first = popen_cli(launchpad_home, "resume", job["id"])
    wait_for(lambda: instance_dirs(launchpad_home), timeout=60, what="the first resume to provision")
    second = run_cli("resume", job["id"], timeout=120)
    assert second.returncode == 1 and "being run by another launchpad process" in second.stderr, second.stderr
    assert len(instance_dirs(launchpad_home)) == 1
    run_cli("down", job["id"], check=True)
    first.communicate(timeout=120)
    assert first.returncode == 1
    assert_nothing_left(launchpad_home, job["id"], run_cli)


def test_down_tears_down_when_logs_cannot_be_written(run_cli, launchpad_home, tmp_path):
    """Item 2: with the disk that keeps logs full, `down` still stops the agent and the trainer."""
    recipe = make_recipe(tmp_path, "diskfull", max_steps=100000)
    job = json.loads(run_cli("up", str(recipe), "--detach", "--json", check=True).stdout)
    pid = wait_for(lambda: trainer_pid(launchpad_home), what="the trainer to start")
    try:
        with full_disk(launchpad_home / "logs"):
            proc = run_cli("down", job["id"])
    except RuntimeError as e:
        pytest.skip(str(e))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    wait_for(lambda: not pid_running(pid), timeout=15, what="the trainer to stop")
    assert_nothing_left(launchpad_home, job["id"], run_cli)


@pytest.mark.parametrize("how", ["garbage", "truncate"])
def test_down_all_works_with_a_damaged_state_db(run_cli, launchpad_home, tmp_path, how):
    """Items 2 and 15: an unreadable (or emptied) state.db does not stop `down --all` from finding the
    instance by its tag; what was done with the database is said."""
    recipe = make_recipe(tmp_path, f"baddb-{how}", max_steps=100000)
    run_cli("up", str(recipe), "--detach", "--json", check=True)
    pid = wait_for(lambda: trainer_pid(launchpad_home), what="the trainer to start")
    damage_state_db(launchpad_home / "state.db", how)
    proc = run_cli("down", "--all", "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert len(json.loads(proc.stdout)["terminated"]) == 1
    said = "move it aside" if how == "garbage" else "was empty (0 bytes"
    assert said in proc.stderr, proc.stderr
    wait_for(lambda: not pid_running(pid), timeout=15, what="the trainer to stop")
    assert instance_dirs(launchpad_home) == []


def test_a_damaged_job_row_hides_nothing_else(run_cli, launchpad_home, tmp_path):
    """Item 15: one row with bad JSON: `status` shows the other jobs and names the damaged one."""
    import sqlite3

    recipe = make_recipe(tmp_path, "fine", max_steps=2)
    run_cli("up", str(recipe), check=True, timeout=240)
    conn = sqlite3.connect(launchpad_home / "state.db")
    # a second job as `up` recorded it (a copy of the first row), then damaged: one training run is enough
    cols = [r[1] for r in conn.execute("PRAGMA table_info(jobs)")]
    row = dict(zip(cols, conn.execute("SELECT * FROM jobs WHERE name = 'fine'").fetchone(), strict=True))
    row.update(id=f"broken-{row['id'].rsplit('-', 1)[-1]}", name="broken", spec_json="{not json")
    conn.execute(f"INSERT INTO jobs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})", [row[c] for c in cols])
    conn.commit()
    conn.close()
    proc = run_cli("status", "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert [r["name"] for r in json.loads(proc.stdout)] == ["fine"]
    assert "is damaged" in proc.stderr and "broken-" in proc.stderr
    assert run_cli("down", "--all").returncode == 0


def test_a_missing_env_variable_is_found_before_any_provider_call(run_cli, launchpad_home, tmp_path):
    """Item 11: `${env:NAME}` unset: exit 2 naming the recipe file, and no job, no instance."""
    recipe = make_recipe(tmp_path, "noenv", env={"HF_TOKEN": "${env:LP_SURELY_UNSET_VAR}"})
    proc = run_cli("up", str(recipe))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert str(recipe) in proc.stderr and "LP_SURELY_UNSET_VAR" in proc.stderr
    assert instance_dirs(launchpad_home) == [] and status(run_cli) == []


def test_fault_hook_is_a_plain_plugin(run_cli, tmp_path):
    """The harness itself: the hook loads as a plugin and is quiet unless armed."""
    env = install_down_hook(tmp_path / "site", "never", tmp_path / "log")
    rows = json.loads(run_cli("check", "--json", env=env, check=False).stdout)["providers"]
    assert {r["provider"] for r in rows} >= {"local"}
    assert fault_log(tmp_path / "log") == []
