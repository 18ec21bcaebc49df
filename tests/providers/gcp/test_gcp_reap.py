"""`launchpad reap` on the GCE double + gcp-storage-emulator: VMs labelled by the provider, the jobs' files
(job.json, state.json, heartbeat.json) in a GCS store, the real gcp provider listing and acting."""

from __future__ import annotations

import time

import pytest
from gcp_helpers import cheap_offer

from launchpad.models import JOB_TAG, InstanceSpec
from launchpad.reaper import ReapClass, Reaper, ReapPolicy
from launchpad.storage import open_store
from launchpad.storage.jobfiles import write_heartbeat, write_job, write_state
from launchpad.testing_stores import BUCKET

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]

STORE = f"gs://{BUCKET}/reap-checkpoints"


def _status(gce, vm: str) -> str | None:
    return next((i["status"] for i in gce.live() if i["name"] == vm), None)


def test_reap_on_gce_orphan_idle_active_finished_and_dry_run(gcp_config, gce):
    from launchpad_gcp import GCPProvider

    provider = GCPProvider({**gcp_config, "checkpoint_uri": STORE})
    vms = {}
    for job, zone in (("nobody-knows", "europe-west4-a"), ("trains", None), ("idles", None), ("finished", None)):
        offer = cheap_offer(provider, zone=zone)
        vms[job] = provider.provision(offer, InstanceSpec(job_id=job, token=f"{job}-1", tags={JOB_TAG: job})).id
    store = open_store(STORE)
    for job in ("trains", "idles", "finished"):
        write_job(store, job, {"spec": {"job_id": job}})
    now = time.time()
    write_heartbeat(store, "trains", {"phase": "training", "trainer_running": True, "step": 9, "idle_since": None})
    write_heartbeat(store, "idles", {"phase": "interrupted", "trainer_running": False, "idle_since": now - 3600,
                                     "autostop_idle_minutes": 30, "autostop_action": "stop"})
    write_state(store, "finished", "SUCCEEDED")

    report = Reaper({"gcp": provider}, None, ReapPolicy(grace=0, dry_run=True)).run()
    by_job = {d.instance.job_id: d for d in report.decisions}
    assert {j: d.klass for j, d in by_job.items()} == {
        "nobody-knows": ReapClass.ORPHAN, "trains": ReapClass.ACTIVE, "idles": ReapClass.IDLE,
        "finished": ReapClass.FINISHED}
    assert by_job["nobody-knows"].region == "europe-west4"
    assert all(_status(gce, vm) == "RUNNING" for vm in vms.values())

    report = Reaper({"gcp": provider}, None, ReapPolicy(grace=0)).run()
    by_job = {d.instance.job_id: d for d in report.decisions}
    assert not report.failed and not report.errors, report
    assert _status(gce, vms["nobody-knows"]) is None and _status(gce, vms["finished"]) is None  # deleted
    assert _status(gce, vms["idles"]) == "TERMINATED" and by_job["idles"].result == "stopped"  # GCE's "stopped"
    assert _status(gce, vms["trains"]) == "RUNNING" and by_job["trains"].result == "kept"
    provider.close()
