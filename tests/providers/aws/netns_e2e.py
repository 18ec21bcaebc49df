"""End-to-end scenarios of the aws provider, run by test_aws_e2e.py INSIDE a network namespace that has
only loopback (so a moto "public IP" is unreachable rather than contacted). Not collected on its own
(the file name does not start with test_): run it through test_aws_e2e.py.

moto's server, the sshd that plays every instance, the real CLI, agent and trainer all run in there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest
import yaml

from launchpad.errors import StorageError
from launchpad.storage import open_store
from launchpad.storage.checkpoints import latest_checkpoint
from launchpad.testing_faults import kill_processes_naming

REPO = Path(__file__).resolve().parents[3]
BUCKET = "s3://launchpad-123456789012-us-east-1/checkpoints"  # the provider's default store in moto's account

pytestmark = [pytest.mark.slow, pytest.mark.sshd, pytest.mark.object_store]


@pytest.fixture(autouse=True)
def only_loopback():
    if os.environ.get("LAUNCHPAD_NETNS") != "1":
        pytest.fail("run through tests/providers/aws/test_aws_e2e.py (inside a network namespace)")


@pytest.fixture
def instance_root(aws_config):
    """The sshd "instance"'s launchpad root: whatever still runs under it when a test ends is killed, as
    terminating a real instance would."""
    root = Path(aws_config["root"])
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


def live_instances(job_id: str | None = None) -> list[dict]:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    filters = [{"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}]
    filters.append({"Name": "tag:launchpad-job", "Values": [job_id]} if job_id
                   else {"Name": "tag-key", "Values": ["launchpad-job"]})
    res = ec2.describe_instances(Filters=filters)
    return [i for r in res["Reservations"] for i in r["Instances"]]


def test_up_smoke_recipe_succeeds_with_its_checkpoint_in_s3(run_cli, instance_root):
    """The issue's "done": `launchpad up recipes/smoke-lora.yaml --provider aws` from a fresh home."""
    proc = run_cli("up", "recipes/smoke-lora.yaml", "--provider", "aws", "--json", timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    job = json.loads(proc.stdout)
    assert job["state"] == "SUCCEEDED" and job["provider"] == "aws" and job["step"] == 100
    ref = latest_checkpoint(open_store(BUCKET), job["id"])
    assert ref is not None and ref.step == 100 and job["last_checkpoint"] == ref.uri
    assert live_instances(job["id"]) == []  # terminated: nothing left billing
    shown = json.loads(run_cli("status", job["id"], "--json", check=True).stdout)
    row = shown[0] if isinstance(shown, list) else shown
    assert row["cost_usd"] > 0 and row["state"] == "SUCCEEDED"  # the offer's price x the instance's time


def test_a_job_is_found_by_tag_after_the_state_db_is_deleted(run_cli, launchpad_home, tmp_path, instance_root):
    path = recipe(tmp_path, "aws-orphan", steps=5000, every=1000)
    up = run_cli("up", str(path), "--provider", "aws", "--detach", "--json", timeout=600)
    assert up.returncode == 0, up.stderr[-3000:]
    job_id = json.loads(up.stdout)["id"]
    assert len(live_instances(job_id)) == 1
    (launchpad_home / "state.db").unlink()
    down = run_cli("down", "--all", "--json", timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert live_instances() == []
    assert run_cli("down", "--all", "--json", timeout=300).returncode == 0  # idempotent


def test_spot_interruption_resumes_on_the_next_offer_from_the_last_checkpoint(run_cli, tmp_path, instance_root,
                                                                              launchpad_home):
    from aws_helpers import interrupt_spot

    path = recipe(tmp_path, "aws-spot", steps=60, every=10, spot=True)
    env = {**os.environ, "LAUNCHPAD_HOME": str(launchpad_home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    up = subprocess.Popen([sys.executable, "-m", "launchpad", "up", str(path), "--provider", "aws", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 600
        first = None
        while time.monotonic() < deadline:
            live = live_instances()
            if live and first is None:
                first = live[0]
            if first is not None:
                try:
                    ref = latest_checkpoint(open_store(BUCKET), _job_of(first))
                except StorageError:  # the provider's default bucket is made at sync, after the instance
                    ref = None
                if ref is not None and ref.step >= 10:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("no checkpoint before the deadline")
        # read it again: moto registers an instance before it sets its market and disks (a poll that lands
        # inside RunInstances sees it half-made)
        first = describe_instance(first["InstanceId"])
        assert first.get("InstanceLifecycle") == "spot"
        # AWS reclaims the instance: it is terminated with the spot reason, and everything on it dies
        interrupt_spot(first["InstanceId"])
        kill_processes_naming(instance_root / "jobs" / first["InstanceId"])
        out, err = up.communicate(timeout=900)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0, out[-2000:] + err[-4000:]
    job = json.loads(out)
    assert job["state"] == "SUCCEEDED" and job["step"] == 60
    from launchpad.state import StateDB

    db = StateDB(launchpad_home / "state.db")
    kinds = [e["kind"] for e in db.events(job["id"])]
    assert "preempted" in kinds and "auto-resume" in kinds
    tried = [e["data"]["offer"] for e in db.events(job["id"]) if e["kind"] == "provision:ok"]
    assert len(tried) == 2 and tried[0] != tried[1]  # the next offer, not the reclaimed one again
    resumes = [e["data"].get("checkpoint") for e in db.events(job["id"]) if e["kind"] == "resume"]
    assert resumes and resumes[-1] and "checkpoint-" in resumes[-1]  # from the last checkpoint, not step 0
    assert live_instances() == []


def describe_instance(instance_id: str) -> dict:
    ec2 = boto3.client("ec2", region_name="us-east-1")
    (reservation,) = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return reservation["Instances"][0]


def _job_of(inst: dict) -> str:
    return next(t["Value"] for t in inst["Tags"] if t["Key"] == "launchpad-job")
