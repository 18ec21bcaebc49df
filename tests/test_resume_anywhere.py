"""`resume --from` (any machine, no local state) and `launchpad watch` on the embedded `local` provider:
the real CLI, agent and trainer, a file:// store outside LAUNCHPAD_HOME, one training run per scenario."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_lifecycle import REPO, instance_dirs, make_recipe, pid_running, trainer_pid, wait_for

pytestmark = pytest.mark.slow


def cli(home: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAUNCHPAD_HOME": str(home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "launchpad", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout)


def manifests(job_dir: Path) -> list[int]:
    return sorted(int(p.parent.name.split("-")[1]) for p in job_dir.glob("checkpoint-*/MANIFEST.json"))


def test_resume_from_a_store_on_a_fresh_home_skips_a_corrupt_checkpoint(launchpad_home, tmp_path):
    store = tmp_path / "store"
    recipe = make_recipe(tmp_path, "anywhere", max_steps=80, checkpoint={"every_steps": 10, "keep": 3,
                                                                         "uri": store.as_uri()})
    up = cli(launchpad_home, "up", str(recipe), "--detach", "--json")
    assert up.returncode == 0, up.stderr
    job_id = json.loads(up.stdout)["id"]
    job_dir = store / job_id
    doc = json.loads((job_dir / "job.json").read_text())  # written by the client once the store was resolved
    assert doc["job_id"] == job_id and doc["spec"]["checkpoint_uri"] == store.as_uri()
    assert doc["offer"].startswith("local/") and doc["options"]["minimize"] == "cost" and doc["recipe_text"]
    wait_for(lambda: len(manifests(job_dir)) >= 2, what="two checkpoints")
    pid = trainer_pid(launchpad_home)
    os.kill(pid, signal.SIGSTOP)  # hold the trainer where it is; `down` ends it
    assert cli(launchpad_home, "down", job_id).returncode == 0
    assert not pid_running(pid)
    state = json.loads((job_dir / "state.json").read_text())
    assert state["state"] == "INTERRUPTED" and state["by"] == "down" and "launchpad down" in state["error"]

    done = manifests(job_dir)
    newest, older = done[-1], done[-2]
    weights = next(p for p in (job_dir / f"checkpoint-{newest}").rglob("*.safetensors"))
    raw = bytearray(weights.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # same size, wrong sha256: a bit flipped in the store
    weights.write_bytes(bytes(raw))

    other = tmp_path / "other-machine"  # no state, no local instances: only the store
    missing = cli(other, "resume", "--from", (store / "nope").as_uri())
    assert missing.returncode == 2 and "no job.json at" in missing.stderr
    proc = cli(other, "resume", "--from", job_dir.as_uri(), "--same-offer", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = json.loads(proc.stdout)
    assert job["id"] == job_id and job["state"] == "SUCCEEDED" and job["step"] == 80
    log = cli(other, "logs", job_id).stdout
    assert f"warning: not resuming from checkpoint-{newest}" in log  # the skipped checkpoint, named
    after = log.split(f"resuming {job_id} from checkpoint-{older}", 1)[1]
    assert int(after.split("step ", 1)[1].split("/", 1)[0]) == older + 1  # continues at the older step
    assert json.loads((job_dir / "state.json").read_text())["state"] == "SUCCEEDED"
    again = cli(other, "resume", "--from", job_dir.as_uri())  # idempotent: the job is known here now
    assert again.returncode == 0 and "already succeeded" in again.stdout
    assert instance_dirs(other) == []


def test_watch_once_recovers_a_detached_job_whose_instance_vanished(launchpad_home, tmp_path):
    store = tmp_path / "store"
    recipe = make_recipe(tmp_path, "watched", max_steps=40, checkpoint={"every_steps": 10, "keep": 2,
                                                                        "uri": store.as_uri()})
    bad = cli(launchpad_home, "up", str(recipe), "--recover", "--strategy", "nowhere")
    assert bad.returncode == 2 and "--strategy nowhere" in bad.stderr and not (launchpad_home / "state.db").exists()
    up = cli(launchpad_home, "up", str(recipe), "--detach", "--recover", "--max-restarts", "1", "--json")
    assert up.returncode == 0, up.stderr
    job_id = json.loads(up.stdout)["id"]
    wait_for(lambda: manifests(store / job_id), what="a checkpoint")
    pid = trainer_pid(launchpad_home)
    os.kill(pid, signal.SIGSTOP)
    (instance,) = instance_dirs(launchpad_home)
    # behind launchpad's back: the machine is gone (its processes and its disk)
    agent = int((instance / "agent.pid").read_text().split()[0])
    for p in (agent, pid):
        os.kill(p, signal.SIGKILL)
    shutil.rmtree(instance)

    proc = cli(launchpad_home, "watch", "--once", "--json")
    assert proc.returncode == 0, proc.stderr
    (action,) = [json.loads(line) for line in proc.stdout.splitlines()]
    assert action["job"] == job_id and action["action"] == "recovered" and action["state"] == "TRAINING", action
    assert action["instance"] != instance.name
    wait_for(lambda: status_of(launchpad_home, job_id) == "SUCCEEDED", timeout=180, what="the job to succeed")
    row = json.loads(cli(launchpad_home, "status", job_id, "--json").stdout)[0]
    assert row["step"] == 40
    quiet = cli(launchpad_home, "watch", "--once", "--json")  # nothing left to do
    assert quiet.returncode == 0 and quiet.stdout.strip() == ""


def status_of(home: Path, job_id: str) -> str:
    proc = cli(home, "watch", "--once", "--json")  # a pass refreshes the job (and finishes it when done)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(cli(home, "status", job_id, "--json").stdout)
    return rows[0]["state"]



