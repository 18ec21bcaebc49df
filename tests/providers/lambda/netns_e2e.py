"""End-to-end scenarios of the lambda provider, run by test_lambda_e2e.py INSIDE a network namespace that has
only loopback (so the double's "public IPs" are unreachable rather than contacted). Not collected on its
own (the file name does not start with test_): run it through test_lambda_e2e.py.

The Lambda API double, moto's S3 (the checkpoint store: Lambda has none), the sshd that plays every
instance, the real CLI, agent and trainer all run in there. Two training runs in all.
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
from lambda_helpers import CHECKPOINTS

from launchpad.errors import StorageError
from launchpad.state import StateDB
from launchpad.storage import open_store
from launchpad.storage.checkpoints import latest_checkpoint
from launchpad.testing_faults import kill_processes_naming

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.slow, pytest.mark.sshd, pytest.mark.object_store]


@pytest.fixture(autouse=True)
def only_loopback():
    if os.environ.get("LAUNCHPAD_NETNS") != "1":
        pytest.fail("run through tests/providers/lambda/test_lambda_e2e.py (inside a network namespace)")


@pytest.fixture
def instance_root(lambda_config):
    """The sshd "instance"'s launchpad root: whatever still runs under it when a test ends is killed, as
    terminating a real instance would."""
    root = Path(lambda_config["root"])
    yield root
    kill_processes_naming(root)


def recipe(tmp_path: Path, name: str, steps: int, every: int, **changes) -> Path:
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    data.update(name=name, max_steps=steps, **changes)
    data["checkpoint"] = {"every_steps": every, "keep": 2}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_up_smoke_recipe_succeeds_with_its_checkpoint_in_the_store(run_cli, lambda_config, lambda_env, instance_root,
                                                                  tmp_path):
    """The issue's "done": `launchpad check` lists lambda, and `launchpad up <smoke recipe> --provider lambda`
    reaches SUCCEEDED from a fresh home, its checkpoint in the configured store and nothing left running."""
    check = run_cli("check", "--json", check=True)
    row = next(r for r in json.loads(check.stdout)["providers"] if r["provider"] == "lambda")
    assert row["usable"] is True and "with capacity now; key from LAMBDA_API_KEY" in row["detail"], row
    path = recipe(tmp_path, "smoke-lora", steps=30, every=10)
    proc = run_cli("up", str(path), "--provider", "lambda", "--json", timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    job = json.loads(proc.stdout)
    assert job["state"] == "SUCCEEDED" and job["provider"] == "lambda" and job["step"] == 30
    ref = latest_checkpoint(open_store(CHECKPOINTS), job["id"])
    assert ref is not None and ref.step == 30 and job["last_checkpoint"] == ref.uri
    assert lambda_env.live() == []  # terminated: nothing left billing
    [launch] = lambda_env.launches()
    assert launch["name"].startswith(f"lp-{job['id']}.")
    shown = json.loads(run_cli("status", job["id"], "--json", check=True).stdout)
    row = shown[0] if isinstance(shown, list) else shown
    assert row["cost_usd"] > 0 and row["state"] == "SUCCEEDED"


def test_an_instance_lost_with_its_host_resumes_from_the_last_checkpoint(lambda_env, tmp_path, instance_root,
                                                                         launchpad_home):
    """Lambda has no spot; what ends an instance under a job is its host failing. The double terminates it
    and everything on it dies; `up` sees the instance gone and resumes on a new one from the last checkpoint."""
    # 4 micro-batches a step: slow enough (~8 steps/s on 2 idle cores) that the failure lands mid-run
    path = recipe(tmp_path, "lambda-host", steps=30, every=10, gradient_accumulation_steps=4)
    env = {**os.environ, "LAUNCHPAD_HOME": str(launchpad_home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    up = subprocess.Popen([sys.executable, "-m", "launchpad", "up", str(path), "--provider", "lambda", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 600
        first = None
        while time.monotonic() < deadline:
            live = lambda_env.live()
            if live and first is None:
                first = live[0]
            if first is not None:
                job = first["tags"][0]["value"]
                try:
                    ref = latest_checkpoint(open_store(CHECKPOINTS), job)
                except StorageError:
                    ref = None
                if ref is not None and ref.step >= 10:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("no checkpoint before the deadline")
        assert first is not None and ref.step < 30
        lambda_env.host_failure(first["id"])
        kill_processes_naming(instance_root / "jobs" / first["id"])
        out, err = up.communicate(timeout=900)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0, out[-2000:] + err[-4000:]
    job = json.loads(out)
    assert job["state"] == "SUCCEEDED" and job["step"] == 30
    db = StateDB(launchpad_home / "state.db")
    events = list(db.events(job["id"]))
    kinds = [e["kind"] for e in events]
    assert "auto-resume" in kinds, kinds
    assert len([e for e in events if e["kind"] == "provision:ok"]) == 2
    resumes = [e["data"].get("checkpoint") for e in events if e["kind"] == "resume"]
    assert resumes and resumes[-1] and "checkpoint-" in resumes[-1]  # from the last checkpoint, not step 0
    assert lambda_env.live() == []
