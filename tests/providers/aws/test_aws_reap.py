"""`launchpad reap` against moto's EC2 + S3 server: instances made with the launchpad tag, the job's
files (job.json, state.json, heartbeat.json) in an S3 store, the real aws provider listing and acting."""

from __future__ import annotations

import time

import pytest

from launchpad.models import JOB_TAG
from launchpad.reaper import ReapClass, Reaper, ReapPolicy
from launchpad.storage import open_store
from launchpad.storage.jobfiles import write_heartbeat, write_job, write_state

STORE = "s3://reap-store/checkpoints"


@pytest.fixture
def provider(aws_env, tmp_path):
    import boto3
    from launchpad_aws import AWSProvider

    for region in ("us-east-1", "us-west-2"):
        boto3.client("ec2", region_name=region)  # (no-op: moto knows every region)
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="reap-store")
    p = AWSProvider({"regions": ["us-east-1", "us-west-2"], "checkpoint_uri": STORE})
    yield p
    p.close()


def _launch(job_id: str, region: str = "us-east-1") -> str:
    import boto3

    ec2 = boto3.client("ec2", region_name=region)
    r = ec2.run_instances(ImageId="ami-12c6146b", InstanceType="g5.xlarge", MinCount=1, MaxCount=1,
                          TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": JOB_TAG, "Value": job_id}]}])
    return r["Instances"][0]["InstanceId"]


def _state(iid: str, region: str = "us-east-1") -> str:
    import boto3

    r = boto3.client("ec2", region_name=region).describe_instances(InstanceIds=[iid])
    return r["Reservations"][0]["Instances"][0]["State"]["Name"]


def _reap(provider, policy: ReapPolicy):
    report = Reaper({"aws": provider}, None, policy).run()
    return report, {d.instance.job_id: d for d in report.decisions}


def test_reap_on_ec2_orphan_idle_active_finished_and_dry_run(provider):
    store = open_store(STORE)
    orphan = _launch("nobody-knows", "us-west-2")
    active = _launch("trains")
    idle = _launch("idles")
    done = _launch("finished")
    for job in ("trains", "idles", "finished"):
        write_job(store, job, {"spec": {"job_id": job}})
    now = time.time()
    write_heartbeat(store, "trains", {"phase": "training", "trainer_running": True, "step": 9, "idle_since": None})
    write_heartbeat(store, "idles", {"phase": "interrupted", "trainer_running": False, "idle_since": now - 3600,
                                     "autostop_idle_minutes": 30, "autostop_action": "stop"})
    write_state(store, "finished", "SUCCEEDED")

    # --dry-run: classified, nothing changes
    report, by_job = _reap(provider, ReapPolicy(grace=0, dry_run=True))
    assert {j: d.klass for j, d in by_job.items()} == {
        "nobody-knows": ReapClass.ORPHAN, "trains": ReapClass.ACTIVE, "idles": ReapClass.IDLE,
        "finished": ReapClass.FINISHED}
    assert by_job["nobody-knows"].region == "us-west-2"
    assert all(_state(i, r) == "running" for i, r in ((orphan, "us-west-2"), (active, "us-east-1"),
                                                     (idle, "us-east-1"), (done, "us-east-1")))

    report, by_job = _reap(provider, ReapPolicy(grace=0))
    assert not report.failed and not report.errors, report
    assert _state(orphan, "us-west-2") in ("shutting-down", "terminated")
    assert _state(done) in ("shutting-down", "terminated")
    assert _state(idle) in ("stopping", "stopped") and by_job["idles"].result == "stopped"
    assert _state(active) == "running" and by_job["trains"].result == "kept"

    # the next pass: the stopped one is kept, the active one still kept, the rest gone from the listing
    _, by_job = _reap(provider, ReapPolicy(grace=0))
    assert set(by_job) == {"trains", "idles"} and by_job["idles"].klass is ReapClass.STOPPED


def test_young_unknown_instance_is_starting_under_the_default_grace(provider):
    iid = _launch("launching-now")
    _, by_job = _reap(provider, ReapPolicy())
    assert by_job["launching-now"].klass is ReapClass.STARTING and _state(iid) == "running"
