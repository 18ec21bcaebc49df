"""`launchpad reap` on the `local` provider: real work directories with a real process standing in for the
agent (what teardown stops), the real file store with heartbeat.json / state.json, the real state DB."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from launchpad_local import LocalProvider

from launchpad.agent import FILES, process_start_time, write_pidfile
from launchpad.jobspec import JobSpec
from launchpad.lifecycle import Lifecycle
from launchpad.models import InstanceSpec, InstanceState, JobState
from launchpad.reaper import Evidence, ReapClass, Reaper, ReapPolicy, classify
from launchpad.state import StateDB
from launchpad.storage import open_store
from launchpad.storage.jobfiles import write_heartbeat, write_job, write_state

NOW_POLICY = ReapPolicy(grace=0)  # no grace: the age of a just-made instance does not protect it


@pytest.fixture
def local(launchpad_home):
    provider = LocalProvider({})
    procs: list[subprocess.Popen] = []
    provider.test_procs = procs  # type: ignore[attr-defined]
    yield provider
    for p in procs:
        p.kill()
        p.wait()


def _instance(provider: LocalProvider, job_id: str, *, process: bool = True):
    inst = provider.provision(provider.offers()[0], InstanceSpec(job_id=job_id, token=f"tok-{job_id}"))
    if process:  # a real process where the agent would be: teardown must end it
        proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
        provider.test_procs.append(proc)  # type: ignore[attr-defined]
        write_pidfile(Path(inst.data["workdir"]) / FILES["agent_pid"], proc.pid)
        return inst, proc
    return inst, None


def _alive(proc: subprocess.Popen) -> bool:
    return process_start_time(proc.pid) is not None


def _store(provider: LocalProvider):
    return open_store(provider.default_checkpoint_uri())


def _beat(provider, job_id: str, **doc) -> None:
    base = {"phase": "training", "step": 3, "trainer_running": True, "idle_since": None,
            "autostop_idle_minutes": 1, "autostop_action": "stop"}
    write_heartbeat(_store(provider), job_id, {**base, **doc})


def _db_job(db: StateDB, provider: LocalProvider, job_id: str, state: JobState, action: str = "stop") -> None:
    spec = JobSpec.from_json({"job_id": job_id, "recipe": {"name": "r", "base_model": "x"},
                              "checkpoint_uri": provider.default_checkpoint_uri(),
                              "autostop": {"idle_minutes": 1, "action": action}})
    db.create_job(job_id, None, spec, "")
    db.set_state(job_id, state)


def _reap(provider, policy=NOW_POLICY, db: StateDB | None = None):
    lifecycle = Lifecycle(db, {"local": provider}) if db is not None else None
    report = Reaper({"local": provider}, db, policy, lifecycle=lifecycle).run()
    return report, {d.instance.job_id: d for d in report.decisions}


def test_orphan_terminated_active_kept_young_unknown_kept(local):
    orphan, orphan_proc = _instance(local, "nobody-knows")
    active, active_proc = _instance(local, "trains")
    write_job(_store(local), "trains", {"spec": {}})
    _beat(local, "trains")
    report, by_job = _reap(local)
    assert by_job["nobody-knows"].klass is ReapClass.ORPHAN and by_job["nobody-knows"].result == "terminated"
    assert not _alive(orphan_proc) and not Path(orphan.data["workdir"]).exists()
    assert by_job["trains"].klass is ReapClass.ACTIVE and by_job["trains"].action == "keep"
    assert _alive(active_proc) and Path(active.data["workdir"]).exists()
    assert not report.failed
    # with the default 15-minute grace a brand-new instance of an unknown job is "starting", kept
    _, young_proc = _instance(local, "just-launched")
    _, by_job = _reap(local, ReapPolicy())
    assert by_job["just-launched"].klass is ReapClass.STARTING and _alive(young_proc)


def test_dry_run_changes_nothing(local):
    inst, proc = _instance(local, "nobody-knows")
    report, by_job = _reap(local, ReapPolicy(grace=0, dry_run=True))
    d = by_job["nobody-knows"]
    assert d.klass is ReapClass.ORPHAN and d.result == "dry run: would terminate"
    assert _alive(proc) and Path(inst.data["workdir"]).exists()
    assert local.instances()[0].state is InstanceState.RUNNING


@pytest.mark.parametrize("action", ["stop", "terminate"])
def test_idle_instance_gets_its_autostop_action_and_the_state_db_records_it(local, action):
    db = StateDB.open()
    _db_job(db, local, "idle-job", JobState.INTERRUPTED, action=action)
    inst, proc = _instance(local, "idle-job")
    _beat(local, "idle-job", phase="interrupted", trainer_running=False, idle_since=time.time() - 600,
          autostop_action=action)
    report, by_job = _reap(local, ReapPolicy(), db)  # the default grace: the idle evidence is enough
    d = by_job["idle-job"]
    assert d.klass is ReapClass.IDLE and d.action == action and d.ok, d
    assert not _alive(proc)
    if action == "stop":
        assert json.loads((Path(inst.data["workdir"]) / "instance.json").read_text())["state"] == "stopped"
    else:
        assert not Path(inst.data["workdir"]).exists()
    kinds = [e["kind"] for e in db.events("idle-job")]
    assert "reap" in kinds and "teardown:done" in kinds
    assert db.instances("idle-job")[0].state.value == ("stopped" if action == "stop" else "terminated")
    # a stopped instance bills no compute: the next pass keeps it
    if action == "stop":
        _, again = _reap(local, ReapPolicy(), db)
        assert again["idle-job"].klass is ReapClass.STOPPED and again["idle-job"].action == "keep"


def test_a_fresh_home_sees_a_finished_job_through_the_store(local, launchpad_home, tmp_path, monkeypatch):
    store_uri, root = local.default_checkpoint_uri(), local.root
    finished, proc1 = _instance(local, "done-by-state")
    done_hb, proc2 = _instance(local, "done-by-heartbeat")
    write_job(_store(local), "done-by-state", {"spec": {}})  # what the client writes with the job
    write_state(_store(local), "done-by-state", JobState.SUCCEEDED.value)
    _beat(local, "done-by-heartbeat", phase="done", trainer_running=False, idle_since=time.time())
    # another machine: no state DB, the same provider root and store
    other = tmp_path / "other-home"
    other.mkdir()
    monkeypatch.setenv("LAUNCHPAD_HOME", str(other))
    provider = LocalProvider({"root": str(root)})
    monkeypatch.setattr(LocalProvider, "default_checkpoint_uri", lambda self: store_uri)
    _, by_job = _reap(provider, ReapPolicy(), StateDB.open())
    assert by_job["done-by-state"].klass is ReapClass.FINISHED and "state.json" in by_job["done-by-state"].reason
    assert by_job["done-by-heartbeat"].klass is ReapClass.FINISHED
    assert by_job["done-by-heartbeat"].result == "terminated" and not _alive(proc1) and not _alive(proc2)


def test_a_known_job_nobody_drives_is_an_orphan_unless_its_attempt_lock_is_held(local):
    from launchpad.joblock import JobLocks
    from launchpad.settings import data_dir

    db = StateDB.open()
    _db_job(db, local, "driven", JobState.TRAINING)
    _db_job(db, local, "abandoned", JobState.TRAINING)
    _, driven_proc = _instance(local, "driven")
    _, abandoned_proc = _instance(local, "abandoned")
    with JobLocks(data_dir() / "locks").attempt("driven"):
        _, by_job = _reap(local, NOW_POLICY, db)
    assert by_job["driven"].klass is ReapClass.ACTIVE and _alive(driven_proc)
    assert by_job["abandoned"].klass is ReapClass.ORPHAN and not _alive(abandoned_proc)
    assert "nobody drives" in by_job["abandoned"].reason


def test_over_age_keeps_a_trainer_it_cannot_checkpoint_unless_forced(local):
    _, proc = _instance(local, "old")
    write_job(_store(local), "old", {"spec": {}})
    (Path(local.root) / local.instances()[0].id / FILES["status"]).write_text(json.dumps({"step": 5}))
    _beat(local, "old")  # a fresh heartbeat: the trainer is alive
    policy = ReapPolicy(max_age=0.001, checkpoint_timeout=0.3)
    time.sleep(0.01)
    report, by_job = _reap(local, policy)
    d = by_job["old"]
    assert d.klass is ReapClass.OVER_AGE and d.checkpoint_first and not d.ok
    assert "could not save a checkpoint" in d.result and _alive(proc)
    assert report.failed == (d,)
    _, by_job = _reap(local, ReapPolicy(max_age=0.001, checkpoint_timeout=0.3, force=True))
    assert by_job["old"].ok and "terminated" in by_job["old"].result and not _alive(proc)


def test_classification_order_of_the_evidence():
    from launchpad.models import Instance

    now = time.time()
    inst = Instance("p", "i-1", "j", InstanceState.RUNNING, created_at=now - 3600)
    fresh_running = {"ts": now - 5, "trainer_running": True, "phase": "training", "step": 1}
    # a fresh heartbeat saying a trainer runs beats a state.json saying the job finished (a resume)
    d = classify(inst, Evidence(store_state={"state": "SUCCEEDED"}, heartbeat=fresh_running), ReapPolicy(), now)
    assert d.klass is ReapClass.ACTIVE
    # a stale one does not
    stale = {**fresh_running, "ts": now - 3000}
    d = classify(inst, Evidence(store_state={"state": "SUCCEEDED"}, heartbeat=stale), ReapPolicy(), now)
    assert d.klass is ReapClass.FINISHED
    # torn down in the store, still up
    d = classify(inst, Evidence(job_doc={}, store_state={"state": "INTERRUPTED", "error": "torn down by `launchpad down`"}),
                 ReapPolicy(), now)
    assert d.klass is ReapClass.ORPHAN and d.action == "terminate"
    # idle with a provider that cannot stop: terminate
    idle = {"ts": now - 5, "trainer_running": False, "phase": "interrupted", "idle_since": now - 4000,
            "autostop_idle_minutes": 30, "autostop_action": "stop"}
    d = classify(inst, Evidence(job_doc={}, heartbeat=idle), ReapPolicy(), now, can_stop=False)
    assert d.klass is ReapClass.IDLE and d.action == "terminate"
    # idle, but inside its window: kept
    d = classify(inst, Evidence(job_doc={}, heartbeat={**idle, "idle_since": now - 60}), ReapPolicy(), now)
    assert d.klass is ReapClass.ACTIVE and d.action == "keep"


def _bundle(db: StateDB, job_id: str):
    from launchpad.models import Bundle

    return Bundle(job_spec=db.job(job_id).spec, recipe_text="name: r\nbase_model: x\n")


def _queue_checkpoint(inst, step: int) -> None:
    """A complete hand-over the agent had not uploaded when it died (launchpad.agent.uploader)."""
    folder = Path(inst.data["workdir"]) / "upload-queue" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "adapter_model.safetensors").write_bytes(b"w" * 1000)
    (folder / "trainer_state.json").write_text(f'{{"global_step": {step}}}')


def test_an_orphan_s_unsent_checkpoint_is_uploaded_before_it_is_terminated(local):
    from launchpad.storage.checkpoints import latest_checkpoint

    db = StateDB.open()
    _db_job(db, local, "crashed", JobState.TRAINING)
    db.update_job("crashed", step=25)
    inst, proc = _instance(local, "crashed")
    local.sync(inst, _bundle(db, "crashed"))
    _queue_checkpoint(inst, 20)
    proc.kill()  # the agent died (its machine crashed and came back): nobody uploads checkpoint-20
    proc.wait()
    _beat(local, "crashed", step=25)
    an_hour_later = lambda: time.time() + 3600  # noqa: E731 - its last heartbeat is an hour old by then
    report = Reaper({"local": local}, db, ReapPolicy(), lifecycle=Lifecycle(db, {"local": local}),
                    clock=an_hour_later).run()
    (d,) = [d for d in report.decisions if d.instance.job_id == "crashed"]
    assert d.klass is ReapClass.ORPHAN and d.salvage_first and d.ok, d
    assert "uploaded checkpoint-20 left on it" in d.result and d.result.endswith("terminated"), d.result
    ref = latest_checkpoint(_store(local), "crashed")
    assert ref is not None and ref.step == 20
    assert not Path(inst.data["workdir"]).exists()


def test_salvage_leaves_a_live_agent_s_queue_alone(local):
    db = StateDB.open()
    _db_job(db, local, "alive", JobState.TRAINING)
    inst, proc = _instance(local, "alive")  # a live process holds agent.pid
    local.sync(inst, _bundle(db, "alive"))
    _queue_checkpoint(inst, 10)
    assert local.salvage(inst) == []
    assert (Path(inst.data["workdir"]) / "upload-queue" / "checkpoint-10").is_dir()
    proc.kill()
    proc.wait()
    (ref,) = local.salvage(inst)
    assert ref.step == 10 and local.salvage(inst) == []  # idempotent: the queue is empty once uploaded
