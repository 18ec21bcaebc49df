"""`launchpad reap` on the RunPod double: an orphaned pod (no job anywhere: not in the state DB, no job.json in the
store) is found by its name and terminated; a dry run changes nothing."""

from __future__ import annotations

import json

import pytest
from runpod_helpers import cheap_offer

from launchpad.models import JOB_TAG, InstanceSpec

pytestmark = [pytest.mark.sshd, pytest.mark.object_store]


def test_an_orphaned_pod_is_reaped(runpod_s3_config, runpod_api, run_cli):
    from launchpad_runpod import RunPodProvider

    provider = RunPodProvider(runpod_s3_config)
    inst = provider.provision(cheap_offer(provider), InstanceSpec(job_id="orphan-1", token="orphan-1-a",
                                                                  tags={JOB_TAG: "orphan-1"}))
    dry = json.loads(run_cli("reap", "--dry-run", "--json", "--grace", "1s", check=True).stdout)
    assert [(r["instance"], r["class"], r["result"]) for r in dry] == [(inst.id, "orphan", "dry run: would terminate")]
    assert len(runpod_api.live()) == 1
    done = json.loads(run_cli("reap", "--json", "--grace", "1s", check=True).stdout)
    assert [(r["instance"], r["result"]) for r in done] == [(inst.id, "terminated")] and runpod_api.live() == []
