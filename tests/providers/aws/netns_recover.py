"""Recovery scenarios of issue 13 on moto's EC2 + S3 and the loopback sshd, run by test_aws_recover.py INSIDE
a network namespace that has only loopback (see netns_e2e.py, whose fixtures and helpers this reuses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from netns_e2e import BUCKET, REPO, _job_of, instance_root, live_instances, only_loopback, recipe  # type: ignore[import-not-found]

from launchpad.state import StateDB
from launchpad.storage import open_store
from launchpad.storage.checkpoints import latest_checkpoint
from launchpad.testing_faults import kill_processes_naming

pytestmark = [pytest.mark.slow, pytest.mark.sshd, pytest.mark.object_store]
_ = (instance_root, only_loopback)  # fixtures


def _env(home: Path) -> dict:
    return {**os.environ, "LAUNCHPAD_HOME": str(home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}


def _wait_checkpoint(step: int) -> dict:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        live = live_instances()
        if live:
            ref = latest_checkpoint(open_store(BUCKET), _job_of(live[0]))
            if ref is not None and ref.step >= step:
                return live[0]
        time.sleep(1)
    pytest.fail("no checkpoint before the deadline")


def test_recover_next_region_after_a_spot_interruption(tmp_path, instance_root, launchpad_home):
    from aws_helpers import interrupt_spot

    # 80 steps: after checkpoint-10 the trainer must still be training when the spot interruption lands (30
    # steps finished within the second the harness took to see checkpoint-10 on a loaded CI machine)
    path = recipe(tmp_path, "aws-recover", steps=80, every=10, spot=True)
    up = subprocess.Popen([sys.executable, "-m", "launchpad", "up", str(path), "--provider", "aws", "--recover",
                           "--strategy", "next-region", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env=_env(launchpad_home), cwd=REPO)
    try:
        first = _wait_checkpoint(10)
        region = first["Placement"]["AvailabilityZone"][:-1]
        interrupt_spot(first["InstanceId"], region)
        kill_processes_naming(instance_root / "jobs" / first["InstanceId"])
        out, err = up.communicate(timeout=900)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0, out[-2000:] + err[-4000:]
    job = json.loads(out)
    assert job["state"] == "SUCCEEDED" and job["step"] == 80
    db = StateDB(launchpad_home / "state.db")
    regions = [i.offer.region for i in db.instances(job["id"]) if i.offer]
    assert len(regions) == 2 and regions[0] == region and regions[1] != region  # the next region
    kinds = [e["kind"] for e in db.events(job["id"])]
    assert "preempted" in kinds and "auto-resume" in kinds
    assert live_instances() == []


def test_resume_from_s3_on_another_machine(tmp_path, instance_root, launchpad_home, aws_config):
    path = recipe(tmp_path, "aws-anywhere", steps=30, every=10)
    up = subprocess.run([sys.executable, "-m", "launchpad", "up", str(path), "--provider", "aws", "--detach", "--json"],
                        capture_output=True, text=True, env=_env(launchpad_home), cwd=REPO, timeout=600)
    assert up.returncode == 0, up.stderr[-3000:]
    job_id = json.loads(up.stdout)["id"]
    first = _wait_checkpoint(10)
    down = subprocess.run([sys.executable, "-m", "launchpad", "down", job_id], capture_output=True, text=True,
                          env=_env(launchpad_home), cwd=REPO, timeout=300)
    assert down.returncode == 0, down.stderr
    assert live_instances() == []
    region = first["Placement"]["AvailabilityZone"][:-1]
    other_region = next(r for r in aws_config["regions"] if r != region)

    other = tmp_path / "other-machine"  # the same credentials, no local state, and only the other region
    other.mkdir()
    (other / "config.yaml").write_text(yaml.safe_dump({"providers": {"aws": {**aws_config, "regions": [other_region]}}}))
    uri = f"{BUCKET}/{job_id}"
    gone = subprocess.run([sys.executable, "-m", "launchpad", "resume", "--from", uri, "--same-offer"],
                          capture_output=True, text=True, env=_env(other), cwd=REPO, timeout=300)
    assert gone.returncode == 1, gone.stdout + gone.stderr
    assert "--same-offer" in gone.stderr and region in gone.stderr and "drop --same-offer" in gone.stderr
    proc = subprocess.run([sys.executable, "-m", "launchpad", "resume", "--from", uri, "--json"],
                          capture_output=True, text=True, env=_env(other), cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    job = json.loads(proc.stdout)
    assert job["id"] == job_id and job["state"] == "SUCCEEDED" and job["step"] == 30
    db = StateDB(other / "state.db")
    assert [i.offer.region for i in db.instances(job_id) if i.offer] == [other_region]
    resumes = [e["data"].get("checkpoint") for e in db.events(job_id) if e["kind"] == "resume"]
    assert resumes[-1] and "checkpoint-" in resumes[-1]  # from the checkpoint in S3, not from step 0
    assert live_instances() == []
