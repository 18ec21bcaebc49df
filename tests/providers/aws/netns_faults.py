"""Fault injection on moto's EC2 + S3 and a loopback sshd, run by test_aws_faults.py INSIDE a network
namespace that has only loopback. Not collected on its own (the file name does not start with test_).

- A spot interruption announced through the instance metadata (a loopback double of IMDSv2) and then
  carried out on moto: the agent saves on the notice, the job resumes elsewhere and ends with the same
  final step and the same loss curve as an uninterrupted run.
- The kill harness of benchmarks/faults.py, one run per kill point: SIGKILL at a point of the lifecycle,
  then `reap`, then `resume`; nothing is left running, no resume starts from an incomplete checkpoint,
  no more than `checkpoint.every_steps` steps are lost.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aws_helpers import CREDENTIALS, interrupt_spot

from launchpad.storage import open_store
from launchpad.storage.checkpoints import list_checkpoints
from launchpad.testing_faults import kill_processes_naming

REPO = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(REPO / "tests" / "agent"), str(REPO / "benchmarks")]
BUCKET = "s3://launchpad-123456789012-us-east-1/checkpoints"

pytestmark = [pytest.mark.slow, pytest.mark.sshd, pytest.mark.object_store]


@pytest.fixture(autouse=True)
def only_loopback():
    if os.environ.get("LAUNCHPAD_NETNS") != "1":
        pytest.fail("run through tests/providers/aws/test_aws_faults.py (inside a network namespace)")


@pytest.fixture(scope="module")
def metadata():
    from metadata_double import MetadataDouble

    with MetadataDouble() as double:
        yield double


@pytest.fixture(scope="module")
def instance_sshd(tmp_path_factory, moto_url, metadata):
    """The sshd that plays every instance, its sessions pointed at the metadata double too (IMDS)."""
    from launchpad.testing_ssh import LoopbackSshd

    env = {"AWS_ENDPOINT_URL": moto_url, "HF_HUB_OFFLINE": "1", "AWS_EC2_METADATA_SERVICE_ENDPOINT": metadata.url,
           **CREDENTIALS}
    server = LoopbackSshd(tmp_path_factory.mktemp("ec2-sshd"), name="ec2", env=env).start()
    yield server
    server.stop()


def spot_recipe(tmp_path: Path, steps: int, every: int) -> Path:
    import yaml

    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    data.update(name="notice", max_steps=steps)
    data["checkpoint"] = {"every_steps": every, "keep": 3}
    data["resources"] = {"spot": True, "regions": ["us-east-1", "us-west-2"]}
    path = tmp_path / "notice.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def final_status(root: Path, job_id: str) -> dict:
    """The newest status.json of the job's trainer (the last instance's)."""
    found = []
    for path in (root / "jobs").glob("*/status.json"):
        if json.loads((path.parent / "job.json").read_text()).get("job_id") == job_id:
            found.append((path.stat().st_mtime, json.loads(path.read_text())))
    assert found, f"no status.json of {job_id} under {root}"
    return max(found, key=lambda f: f[0])[1]


def test_a_spot_notice_saves_and_the_job_ends_as_if_uninterrupted(run_cli, tmp_path, aws_config, metadata,
                                                                   launchpad_home):
    import boto3

    root = Path(aws_config["root"])
    recipe = spot_recipe(tmp_path, steps=100, every=25)
    clean = run_cli("up", str(recipe), "--provider", "aws", "--json", timeout=900)
    assert clean.returncode == 0, clean.stderr[-3000:]
    clean_job = json.loads(clean.stdout)
    reference = {int(s): v for s, v in final_status(root, clean_job["id"])["losses"]}

    env = {**os.environ, "LAUNCHPAD_HOME": str(launchpad_home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    up = subprocess.Popen([sys.executable, "-m", "launchpad", "up", str(recipe), "--provider", "aws", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    ec2 = boto3.client("ec2", region_name="us-east-1")
    try:
        first, deadline = None, time.monotonic() + 600
        while time.monotonic() < deadline and up.poll() is None:  # wait for the trainer's 5th step
            res = ec2.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["running"]},
                                                  {"Name": "tag-key", "Values": ["launchpad-job"]}])
            live = [i for r in res["Reservations"] for i in r["Instances"]]
            if live:
                first = live[0]
                status = root / "jobs" / first["InstanceId"] / "status.json"
                if status.exists() and (json.loads(status.read_text()).get("step") or 0) >= 5:
                    break
            time.sleep(0.1)
        assert first is not None, "no instance came up"
        job_id = next(t["Value"] for t in first["Tags"] if t["Key"] == "launchpad-job")
        metadata.notices_left, metadata.notice = 1, True  # IMDS: "spot/instance-action: terminate"
        # The trainer says which step the notice saved (its log); the step may fall on the 25-step grid,
        # and training goes on while that checkpoint uploads, so newer checkpoints may follow it.
        train_log = root / "jobs" / first["InstanceId"] / "train.log"
        deadline = time.monotonic() + 300
        saved = None
        while time.monotonic() < deadline and saved is None:
            said = re.search(r"save requested \(SAVE_NOW\): saving at step (\d+)",
                             train_log.read_text() if train_log.exists() else "")
            if said:
                saved = next((r for r in list_checkpoints(open_store(BUCKET), job_id) if r.step == int(said[1])), None)
            time.sleep(0.2)
        assert saved is not None, "the agent did not save on the notice"
        assert saved.step < 100, f"the notice came after the last step ({saved.step}): nothing was tested"
        # two minutes later AWS takes the machine: terminated with the spot reason, everything on it dies
        interrupt_spot(first["InstanceId"])
        kill_processes_naming(root / "jobs" / first["InstanceId"])
        out, err = up.communicate(timeout=900)
    finally:
        metadata.notice = False
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0, out[-2000:] + err[-4000:]
    job = json.loads(out)
    assert job["state"] == "SUCCEEDED" and job["step"] == 100
    from launchpad.state import StateDB

    db = StateDB(launchpad_home / "state.db")
    resumes = [e["data"].get("checkpoint") for e in db.events(job["id"]) if e["kind"] == "resume"]
    assert resumes, "the job was not resumed"  # from the notice's checkpoint, or a newer complete one
    assert resumes[-1] is not None and int(resumes[-1].rsplit("-", 1)[1]) >= saved.step, (resumes, saved)
    curve = {int(s): v for s, v in final_status(root, job["id"])["losses"]}
    assert sorted(curve) == sorted(reference)
    assert all(curve[s] == pytest.approx(reference[s], rel=1e-4, abs=1e-5) for s in reference), (curve, reference)
    assert [r.step for r in list_checkpoints(open_store(BUCKET), job["id"])][-1] == 100


@pytest.mark.parametrize("point", ["provision", "sync", "training", "upload", "teardown", "detached"])
def test_kill_at_a_point_then_reap_and_resume_leaves_nothing_running(point, tmp_path):
    """One run of benchmarks/faults.py's harness per kill point (the script runs 100)."""
    import faults

    cloud = faults.Cloud(tmp_path)
    try:
        faults.write_home(cloud, tmp_path / "home", tmp_path)
        harness = faults.Harness(cloud, tmp_path, faults.write_recipe(tmp_path, 30, 10), 10, 30)
        run = harness.one(0, point, random.Random(point))
    finally:
        cloud.close()
    assert run.left_after_reap == 0 and run.left_at_end == 0, run
    assert not run.resumed_incomplete, run
    assert run.steps_lost is None or run.steps_lost <= 10, run
    assert run.final_state == "SUCCEEDED" or point in ("provision", "sync", "detached") or not run.reached_training, run
    if point == "detached":  # the client never came back: the agent finished, uploaded and stopped its machine,
        assert run.final_step == 30 and run.stopped_by_agent, run  # and a reap from another machine says so
        assert run.other_reap and "the agent's heartbeat says done at step 30" in run.other_reap[0], run
