"""End-to-end scenarios of the runpod provider, run by test_runpod_e2e.py INSIDE a network namespace that has only
loopback. Not collected on its own (the file name does not start with test_): run it through test_runpod_e2e.py.

The RunPod GraphQL double, moto's S3 (the checkpoint store), the sshd that plays every pod, the real CLI, agent
and trainer all run in there. Two training runs: the issue's "done", and a reclaimed interruptible pod.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from runpod_helpers import CHECKPOINTS

from launchpad.state import StateDB
from launchpad.storage import open_store
from launchpad.storage.checkpoints import latest_checkpoint
from launchpad.testing_faults import kill_processes_naming

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.slow, pytest.mark.sshd, pytest.mark.object_store]


@pytest.fixture(autouse=True)
def only_loopback():
    if os.environ.get("LAUNCHPAD_NETNS") != "1":
        pytest.fail("run through tests/providers/runpod/test_runpod_e2e.py (inside a network namespace)")


@pytest.fixture
def pod_root(runpod_s3_config):
    """The sshd "pod"'s launchpad root: whatever still runs under it when a test ends is killed, as
    terminating a real pod would."""
    root = Path(runpod_s3_config["root"])
    yield root
    kill_processes_naming(root)


def recipe(tmp_path: Path, name: str, steps: int, every: int, **resources) -> Path:
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    data.update(name=name, max_steps=steps)
    data["checkpoint"] = {"every_steps": every, "keep": 2}
    if resources:
        data["resources"] = resources
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def job_of(pod: dict) -> str:
    return next(e.split("=", 1)[1] for e in pod["env"] if e.startswith("LAUNCHPAD_JOB="))


def test_up_smoke_recipe_succeeds_after_a_sold_out_gpu_with_its_checkpoint_in_s3(run_cli, runpod_api, pod_root,
                                                                                 launchpad_home, tmp_path):
    """The issue's "done": `launchpad check` lists runpod, and `launchpad up <smoke recipe> --provider runpod`
    reaches SUCCEEDED; the cheapest GPU type is sold out, so it moves to the next offer; nothing is left."""
    check = run_cli("check", "--json", check=True)
    row = next(r for r in json.loads(check.stdout)["providers"] if r["provider"] == "runpod")
    assert row["usable"] is True and row["detail"].startswith("account user_launchpad_test"), row
    runpod_api.sold_out.add("NVIDIA GeForce RTX 4090")  # the cheapest on-demand type
    proc = run_cli("up", str(recipe(tmp_path, "smoke-lora", steps=30, every=10)), "--provider", "runpod", "--json",
                   timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    job = json.loads(proc.stdout)
    assert job["state"] == "SUCCEEDED" and job["provider"] == "runpod" and job["step"] == 30
    events = list(StateDB(launchpad_home / "state.db").events(job["id"]))
    failed = [e["data"] for e in events if e["kind"] == "provision:failed"]
    ok = [e["data"] for e in events if e["kind"] == "provision:ok"]
    assert failed and failed[0]["scope"] == "offer" and "RTX4090" in failed[0]["offer"], events
    assert len(ok) == 1 and "RTX4090" not in ok[0]["offer"]
    ref = latest_checkpoint(open_store(CHECKPOINTS), job["id"])
    assert ref is not None and ref.step == 30 and job["last_checkpoint"] == ref.uri
    assert runpod_api.live() == []  # terminated: nothing left billing
    [deployed] = runpod_api.calls("podFindAndDeployOnDemand")[-1:]
    assert deployed["imageName"].startswith("runpod/pytorch:") and deployed["ports"] == "22/tcp"
    shown = json.loads(run_cli("status", job["id"], "--json", check=True).stdout)
    row = shown[0] if isinstance(shown, list) else shown
    assert row["cost_usd"] > 0 and row["state"] == "SUCCEEDED"


def test_a_reclaimed_interruptible_pod_resumes_from_the_last_checkpoint(runpod_api, pod_root, launchpad_home, tmp_path):
    path = recipe(tmp_path, "runpod-spot", steps=80, every=10, spot=True)
    # one try per API call: the injected 503s below reach the lifecycle instead of tenacity's retries
    env = {**os.environ, "LAUNCHPAD_HOME": str(launchpad_home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200",
           "LAUNCHPAD_RUNPOD_RETRIES": "1"}
    up = subprocess.Popen([sys.executable, "-m", "launchpad", "up", str(path), "--provider", "runpod", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        deadline, first = time.monotonic() + 600, None
        while time.monotonic() < deadline:
            live = runpod_api.live()
            first = first or (live[0] if live else None)
            if first is not None:
                ref = latest_checkpoint(open_store(CHECKPOINTS), job_of(first))
                if ref is not None and ref.step >= 10:
                    break
            if up.poll() is not None:
                pytest.fail(f"up ended before a checkpoint: {up.communicate()}")
            time.sleep(0.5)
        else:
            pytest.fail("no checkpoint before the deadline")
        assert first is not None and first["podType"] == "INTERRUPTABLE"
        # RunPod reclaims the pod: it is stopped, and everything in its container dies; and the API answers
        # the next two questions about the pod with a 503 (INJECTED): a blip at that moment must not make
        # the reclaim look like a trainer killed on a live pod, which would stop the job for the user
        runpod_api.preempt(first["id"])
        runpod_api.fail_next("pod", "Service Unavailable", times=2)
        kill_processes_naming(pod_root / "jobs" / first["id"])
        out, err = up.communicate(timeout=900)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0, out[-2000:] + err[-4000:]
    job = json.loads(out)
    assert job["state"] == "SUCCEEDED" and job["step"] == 80
    events = list(StateDB(launchpad_home / "state.db").events(job["id"]))
    kinds = [e["kind"] for e in events]
    assert "preempted" in kinds and "auto-resume" in kinds
    assert runpod_api.failures_left("pod") == 0  # both 503s were answered to the `up` that resumed
    tried = [e["data"]["offer"] for e in events if e["kind"] == "provision:ok"]
    assert len(tried) == 2 and tried[0] != tried[1]  # the next offer, not the reclaimed one again
    resumes = [e["data"].get("checkpoint") for e in events if e["kind"] == "resume"]
    assert resumes and resumes[-1] and "checkpoint-" in resumes[-1]  # from the last checkpoint, not step 0
    assert runpod_api.live() == []  # the reclaimed (stopped) pod was terminated too: its volume no longer bills
