"""The agent on the real `local` provider: it keeps the job safe with the client attached or gone."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import yaml

from launchpad.storage import open_store
from launchpad.storage.checkpoints import latest_checkpoint

from .metadata_double import MetadataDouble

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "recipes" / "smoke-lora.yaml"
pytestmark = pytest.mark.slow


def write_recipe(tmp_path: Path, name: str, **changes) -> Path:
    data = yaml.safe_load(SMOKE.read_text())
    data.update(name=name, **changes)
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def configure_local(home: Path, **settings) -> None:
    (home / "config.yaml").write_text(yaml.safe_dump({"providers": {"local": settings}}))


def wait_for(predicate, timeout=120.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_preemption_notice_saves_then_the_job_resumes_by_itself(run_cli, launchpad_home, tmp_path):
    with MetadataDouble() as md:
        configure_local(launchpad_home, preemption=["aws"], preemption_poll_seconds=0.2)
        recipe = write_recipe(tmp_path, "spot", max_steps=150, checkpoint={"every_steps": 1000, "keep": 2})
        env = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": md.url}
        import os
        import subprocess

        up = subprocess.Popen([sys.executable, "-m", "launchpad", "up", str(recipe)], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**os.environ, **env, "LAUNCHPAD_HOME": str(launchpad_home), "COLUMNS": "200"})

        def training_step():
            for status in (launchpad_home / "local" / "instances").glob("*/status.json"):
                try:
                    return json.loads(status.read_text()).get("step", 0) >= 20
                except ValueError:
                    return False
        wait_for(training_step, what="training to reach step 20")
        md.notice = True  # the machine is about to be reclaimed
        out, err = up.communicate(timeout=300)
    assert up.returncode == 0, out + err
    assert "spot interruption notice" in out + err and "resuming automatically" in out + err
    (job,) = json.loads(run_cli("status", "--json", check=True).stdout)
    assert job["state"] == "SUCCEEDED" and job["step"] == 150
    log = run_cli("logs", job["id"], check=True).stdout
    saved = int(log.split("save requested")[1].split("saving at step ")[1].split()[0])
    assert 20 <= saved < 150
    assert f"resuming {job['id']} from checkpoint-{saved}" in log, "the save made on notice is where it resumed"


def test_agent_finishes_uploads_and_autostops_with_the_client_gone(run_cli, launchpad_home, tmp_path):
    record = tmp_path / "autostop-calls.jsonl"
    recorder = Path(__file__).parent / "record_autostop_for_tests.py"
    configure_local(launchpad_home, autostop_command=[sys.executable, str(recorder), str(record), "shutdown", "-h", "now"],
                    idle_seconds=2)
    recipe = write_recipe(tmp_path, "gone", max_steps=60, checkpoint={"every_steps": 20, "keep": 2})
    job = json.loads(run_cli("up", str(recipe), "--detach", "--json", check=True).stdout)
    for name in ("state.db", "state.db-wal", "state.db-shm"):  # the client forgets everything
        (launchpad_home / name).unlink(missing_ok=True)

    calls = wait_for(lambda: record.exists() and record.read_text().splitlines(), timeout=180,
                     what="the agent to auto-stop")
    assert json.loads(calls[0])["argv"] == ["shutdown", "-h", "now"]
    ref = latest_checkpoint(open_store((launchpad_home / "checkpoints").as_uri()), job["id"])
    assert ref is not None and ref.step == 60, "the final checkpoint was uploaded before stopping"
    (workdir,) = (launchpad_home / "local" / "instances").glob("*/")
    status = json.loads((workdir / "status.json").read_text())
    assert status["phase"] == "done" and status["autostop"]["action"] == "stop"
    from launchpad.agent import pid_alive

    wait_for(lambda: pid_alive(workdir / "agent.pid") is None, timeout=20, what="the agent to end")
    run_cli("down", "--all", check=True)


def test_a_failed_download_ends_the_job_with_one_line(run_cli, launchpad_home, tmp_path):
    from launchpad_local import LocalProvider

    from launchpad.lifecycle import Lifecycle, SilentReporter
    from launchpad.recipe import load_recipe
    from launchpad.state import StateDB

    # A store URI that does not exist, as a user would write it for s3:// (file:// paths load as local paths).
    recipe = load_recipe(write_recipe(tmp_path, "nodata", max_steps=10))
    bad = recipe.model_copy(update={"datasets": [recipe.datasets[0].model_copy(
        update={"path": (tmp_path / "bucket" / "missing.jsonl").as_uri()})]})
    lc = Lifecycle(StateDB.open(), {"local": LocalProvider()}, {}, SilentReporter())
    job_id = lc.submit(bad, "")
    from launchpad.errors import JobFailed

    with pytest.raises(JobFailed) as err:
        lc.run(job_id)
    assert "pre-warm of dataset[0] failed" in str(err.value) and "missing.jsonl" in str(err.value)
    assert "\n" not in lc.db.job(job_id).error
    assert lc.db.job(job_id).state.value == "FAILED"
