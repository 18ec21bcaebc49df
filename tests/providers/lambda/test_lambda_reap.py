"""`launchpad reap` on the Lambda double + moto's S3: instances found by name (their age read from it: the API
has none), the jobs' files in the configured store, the real lambda provider listing and acting. An idle
instance whose autostop says `stop` is terminated: Lambda cannot stop."""

from __future__ import annotations

import time

import pytest
from lambda_helpers import CHECKPOINTS, cheap_offer

from launchpad.models import JOB_TAG, InstanceSpec
from launchpad.reaper import ReapClass, Reaper, ReapPolicy
from launchpad.storage import open_store
from launchpad.storage.jobfiles import write_heartbeat, write_job

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


def test_reap_orphan_young_idle_and_active(lambda_provider, lambda_env):
    from launchpad_lambda import instance_name

    ids = {}
    for job in ("nobody-knows", "just-launched", "idles", "trains"):
        spec = InstanceSpec(job_id=job, token=f"{job}-1", tags={JOB_TAG: job})
        ids[job] = lambda_provider.provision(cheap_offer(lambda_provider), spec).id
    for job in ("nobody-knows", "idles", "trains"):  # STAND-IN: launched an hour ago (the name carries the time)
        lambda_env.instances[ids[job]]["name"] = instance_name(job, f"{job}-1", 0, now=time.time() - 3600)
    store = open_store(CHECKPOINTS)
    for job in ("idles", "trains"):
        write_job(store, job, {"spec": {"job_id": job}})
    now = time.time()
    write_heartbeat(store, "trains", {"phase": "training", "trainer_running": True, "step": 9, "idle_since": None})
    write_heartbeat(store, "idles", {"phase": "interrupted", "trainer_running": False, "idle_since": now - 3600,
                                     "autostop_idle_minutes": 30, "autostop_action": "stop"})

    report = Reaper({"lambda": lambda_provider}, None, ReapPolicy()).run()
    by_job = {d.instance.job_id: d for d in report.decisions}
    assert not report.errors, report
    assert by_job["nobody-knows"].klass is ReapClass.ORPHAN and by_job["just-launched"].klass is ReapClass.STARTING
    assert by_job["trains"].klass is ReapClass.ACTIVE
    assert by_job["idles"].klass is ReapClass.IDLE and by_job["idles"].action == "terminate"  # its autostop said stop
    assert {i["id"] for i in lambda_env.live()} == {ids["just-launched"], ids["trains"]}
