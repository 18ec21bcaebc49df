"""End to end on the embedded `local` provider: the real CLI, the real agent, the real trainer."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from launchpad.storage import open_store
from launchpad.storage.checkpoints import download_checkpoint, latest_checkpoint

REPO = Path(__file__).resolve().parent.parent
SMOKE = REPO / "recipes" / "smoke-lora.yaml"

pytestmark = pytest.mark.slow


def make_recipe(tmp_path: Path, name: str = "e2e", **changes) -> Path:
    data = yaml.safe_load(SMOKE.read_text())
    data["name"] = name
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    for key, value in changes.items():
        section, _, field = key.partition("__")
        if field:
            data.setdefault(section, {})[field] = value
        else:
            data[key] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def status(run_cli, job: str | None = None) -> list[dict] | dict:
    proc = run_cli("status", *([job] if job else []), "--json", check=True)
    rows = json.loads(proc.stdout)
    return rows[0] if job else rows


def wait_for(predicate, timeout: float = 120, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def instance_dirs(home: Path) -> list[Path]:
    return sorted((home / "local" / "instances").glob("*/"))


def trainer_pid(home: Path) -> int | None:
    for d in instance_dirs(home):
        try:
            return int((d / "trainer.pid").read_text().split()[0])
        except (OSError, ValueError):
            continue
    return None


def pid_running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def popen_cli(home: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "LAUNCHPAD_HOME": str(home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "launchpad", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO, preexec_fn=_ctrl_c_as_at_a_terminal)


def _ctrl_c_as_at_a_terminal() -> None:
    # A shell without job control starts background commands (`pytest &` in a script) with SIGINT
    # ignored, and children inherit that: Python then installs no KeyboardInterrupt handler and the
    # Ctrl-C test's signal does nothing. A user's terminal delivers it; so does this.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_up_smoke_recipe_end_to_end(run_cli, launchpad_home):
    started = time.monotonic()
    proc = run_cli("up", str(SMOKE.relative_to(REPO)), timeout=180)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert elapsed < 180, f"the smoke recipe must finish in under 3 minutes (took {elapsed:.0f} s)"

    (job,) = status(run_cli)
    assert job["state"] == "SUCCEEDED" and job["provider"] == "local"
    assert job["step"] == job["total_steps"] == 100
    assert job["last_checkpoint"].endswith("/checkpoint-100")
    assert job["cost_usd"] == 0

    store = open_store((launchpad_home / "checkpoints").as_uri())
    ref = latest_checkpoint(store, job["id"])
    assert ref is not None and ref.step == 100
    local = download_checkpoint(store, ref, launchpad_home / "verify")  # verifies every sha256
    manifest = json.loads((local / "MANIFEST.json").read_text())
    assert manifest["step"] == 100 and manifest["files"]
    assert (local / "tokenizer.json").exists(), "the tokenizer is saved next to every checkpoint"

    losses = [h["loss"] for h in json.loads((local / "trainer_state.json").read_text())["log_history"] if "loss" in h]
    assert losses[0] > 6 and sum(losses[-10:]) / 10 < 1.5, f"loss should fall clearly: {losses[0]} -> {losses[-10:]}"
    assert instance_dirs(launchpad_home) == [], "the local instance is torn down after success"
    assert "step 100/100" in run_cli("logs", job["id"], check=True).stdout

    # TensorBoard reads the run's scalars from the job's folder in the store (the instance is gone)
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer  # type: ignore[import-untyped]

    runs = launchpad_home / "checkpoints" / job["id"] / "runs"
    mux = EventMultiplexer().AddRunsFromDirectory(str(runs))
    mux.Reload()
    scalars = [e for run in mux.Runs() for e in mux.Scalars(run, "train/loss")]
    assert len(scalars) == 100 and scalars[0].value > 6, [r for r in mux.Runs()]
    assert latest_checkpoint(store, job["id"]).step == 100  # the runs/ folder is no checkpoint to the store's scan

    # the terminal view of the finished run: its curve comes from the store, at 80 and 120 columns
    for columns in (80, 120):
        text = run_cli("status", job["id"], check=True, env={"COLUMNS": str(columns)}).stdout
        assert all(len(line) <= columns for line in text.splitlines()), text
        assert job["id"] in text and "100 logged" in text and "checkpoint-100, complete, written" in text, text
        curve = next(line for line in text.splitlines() if "loss curve" in line)
        assert curve.count("▁") + curve.count("█") >= 5  # a drawn curve: high at the start, low at the end
        assert curve.index("█") < curve.index("▁")


def test_kill_9_then_resume_continues_from_the_checkpoint(run_cli, launchpad_home, tmp_path):
    recipe = make_recipe(tmp_path, "killme", max_steps=120, checkpoint={"every_steps": 20, "keep": 3})
    up = popen_cli(launchpad_home, "up", str(recipe))
    store_root = launchpad_home / "checkpoints"
    manifests = lambda: sorted(store_root.glob("killme-*/checkpoint-*/MANIFEST.json"))  # noqa: E731
    wait_for(manifests, what="the first checkpoint's manifest")
    pid = trainer_pid(launchpad_home)
    os.kill(pid, signal.SIGKILL)
    out, err = up.communicate(timeout=60)
    assert up.returncode == 1, out + err
    assert "killed by signal 9" in err and "launchpad resume" in err

    (job,) = status(run_cli)
    assert job["state"] == "INTERRUPTED"
    assert not pid_running(pid)
    job_dir = store_root / job["id"]
    done = sorted(int(p.parent.name.split("-")[1]) for p in job_dir.glob("checkpoint-*/MANIFEST.json"))
    assert done and done[-1] < 120
    # A checkpoint without a manifest (half-uploaded) is never resumed from, however high its step.
    fake = job_dir / "checkpoint-110"
    fake.mkdir()
    (fake / "trainer_state.json").write_text("{}")

    proc = run_cli("resume", job["id"], timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"resuming {job['id']} from checkpoint-{done[-1]}" in proc.stdout
    final = status(run_cli, job["id"])
    assert final["state"] == "SUCCEEDED" and final["step"] == 120

    log = run_cli("logs", job["id"], check=True).stdout
    second_run = log.split(f"resuming {job['id']} from checkpoint-{done[-1]}", 1)[1]
    first_step = int(second_run.split("step ", 1)[1].split("/", 1)[0])
    assert first_step == done[-1] + 1, "training continues after the checkpoint's step, not from 0"
    assert "step 120/120" in second_run


def test_a_crashed_machine_s_unsent_checkpoint_is_uploaded_before_teardown_and_resumed_from(
        run_cli, launchpad_home, tmp_path):
    """The client, the agent and the trainer all die (a crash) while the agent holds a complete
    checkpoint in its upload queue: `resume` uploads it before tearing the machine down, and trains on
    from it rather than from the one before."""
    import shutil

    from launchpad.storage.checkpoints import list_checkpoints
    from launchpad.testing_faults import kill_processes_naming, processes_naming

    recipe = make_recipe(tmp_path, "crash", max_steps=60, checkpoint={"every_steps": 20, "keep": 3})
    up = popen_cli(launchpad_home, "up", str(recipe))
    store_root = launchpad_home / "checkpoints"
    wait_for(lambda: list(store_root.glob("crash-*/checkpoint-*/MANIFEST.json")), what="the first checkpoint")
    up.kill()
    up.communicate(timeout=30)
    (workdir,) = instance_dirs(launchpad_home)
    kill_processes_naming(workdir)  # everything on the "machine" dies at once
    wait_for(lambda: not processes_naming(workdir), timeout=15, what="the agent and trainer to die")
    (job_dir,) = store_root.glob("crash-*")  # not `status`: it would reconcile (and tear down) the job now
    job = {"id": job_dir.name}
    store = open_store(store_root.as_uri())
    newest = list_checkpoints(store, job["id"])[-1]
    # What the agent was handed and had not uploaded when it died: the newest checkpoint is only on the
    # machine's disk, in the queue (without the manifest the upload writes last), not in the store.
    queued = workdir / "upload-queue" / newest.name
    shutil.rmtree(queued, ignore_errors=True)
    shutil.move(str(store_root / job["id"] / newest.name), str(queued))
    (queued / "MANIFEST.json").unlink()
    before = [r.step for r in list_checkpoints(store, job["id"])]
    assert newest.step not in before

    proc = run_cli("resume", job["id"], timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"uploaded {newest.name}, left on" in proc.stdout, proc.stdout
    assert f"resuming {job['id']} from {newest.name}" in run_cli("logs", job["id"], check=True).stdout
    final = status(run_cli, job["id"])
    assert final["state"] == "SUCCEEDED" and final["step"] == 60
    from launchpad.state import StateDB

    kinds = [e["kind"] for e in StateDB(launchpad_home / "state.db").events(job["id"])]
    assert "salvaged" in kinds and kinds.index("salvaged") < kinds.index("teardown:start")


def test_ctrl_c_leaves_a_resumable_job_and_nothing_running(run_cli, launchpad_home, tmp_path):
    recipe = make_recipe(tmp_path, "ctrlc", max_steps=100000, checkpoint={"every_steps": 10, "keep": 2})
    up = popen_cli(launchpad_home, "up", str(recipe))
    pid = wait_for(lambda: trainer_pid(launchpad_home), what="the trainer to start")
    wait_for(lambda: list((launchpad_home / "checkpoints").glob("ctrlc-*/checkpoint-*/MANIFEST.json")),
             what="a checkpoint")
    up.send_signal(signal.SIGINT)
    out, err = up.communicate(timeout=60)
    assert up.returncode == 130, out + err
    assert "resume" in err
    (job,) = status(run_cli)
    assert job["state"] == "INTERRUPTED"
    wait_for(lambda: not pid_running(pid), timeout=15, what="the trainer to stop")
    assert instance_dirs(launchpad_home) == []


def test_down_is_idempotent_and_instances_survive_a_lost_state_file(run_cli, launchpad_home, tmp_path):
    from launchpad_local import LocalProvider

    recipe = make_recipe(tmp_path, "orphan", max_steps=100000)
    proc = run_cli("up", str(recipe), "--detach", "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)
    assert job["state"] == "TRAINING"
    pid = wait_for(lambda: trainer_pid(launchpad_home), what="the trainer to start")

    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (launchpad_home / name).unlink(missing_ok=True)
    found = [i for i in LocalProvider().instances() if i.job_id == job["id"]]
    assert len(found) == 1, "the job's instance is found by its tag, without the state file"

    first = run_cli("down", "--all", "--json", check=True)
    assert json.loads(first.stdout)["terminated"] == [found[0].id]
    wait_for(lambda: not pid_running(pid), timeout=15, what="the trainer to stop")
    second = run_cli("down", "--all", "--json", check=True)
    assert json.loads(second.stdout)["terminated"] == []


def test_down_job_twice(run_cli, launchpad_home, tmp_path):
    recipe = make_recipe(tmp_path, "twice", max_steps=100000)
    job = json.loads(run_cli("up", str(recipe), "--detach", "--json", check=True).stdout)
    pid = wait_for(lambda: trainer_pid(launchpad_home), what="the trainer to start")
    assert run_cli("down", job["id"], check=True).returncode == 0
    again = run_cli("down", job["id"], check=True)
    assert "nothing to tear down" in again.stdout
    assert not pid_running(pid)
    assert status(run_cli, job["id"])["state"] == "INTERRUPTED"


def test_recipe_values_reach_the_trainer_as_data(run_cli, launchpad_home, tmp_path):
    """Shell metacharacters in env values and in paths arrive verbatim; nothing runs them."""
    import uuid

    marker_name = f"lp-pwned-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / marker_name
    evil = f"$(touch {marker}); `touch {marker}` | touch {marker} && echo '\"'"
    weird_dir = tmp_path / f"it's a \"dir\"; $(touch {marker_name}) `touch {marker_name}`"
    weird_dir.mkdir()
    data = weird_dir / "data.jsonl"
    data.write_bytes((REPO / "recipes" / "data" / "smoke-chat.jsonl").read_bytes())
    recipe = make_recipe(tmp_path, "quoting", max_steps=100000, env={"PROBE": evil, "FROM_ENV": "${env:LP_TEST_SECRET}"})
    doc = yaml.safe_load(recipe.read_text())
    doc["datasets"][0]["path"] = str(data)
    recipe.write_text(yaml.safe_dump(doc))

    proc = run_cli("up", str(recipe), "--detach", "--json", env={"LP_TEST_SECRET": "s3cr3t-value"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    pid = wait_for(lambda: trainer_pid(launchpad_home), what="the trainer to start")
    environ = dict(kv.split("=", 1) for kv in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in kv)
    assert environ["PROBE"] == evil
    assert environ["FROM_ENV"] == "s3cr3t-value"
    wait_for(lambda: "step 1/" in run_cli("logs", "quoting").stdout, what="training on the oddly named dataset")
    run_cli("down", "--all", check=True)
    assert not marker.exists()
    assert not list(tmp_path.rglob(marker_name)) and not list(REPO.glob(marker_name))
    # The secret resolved from the environment is never stored.
    for path in launchpad_home.rglob("*"):
        if path.is_file():
            assert b"s3cr3t-value" not in path.read_bytes(), f"secret leaked into {path}"
