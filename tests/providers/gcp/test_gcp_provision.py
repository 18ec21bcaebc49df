"""Provisioning on the GCE double: labels everywhere, idempotent inserts, reconcile by label, Spot, local
SSD, N1 accelerators, the shared firewall rules and bucket, pinned host keys, teardown, the autostop."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from gcp_helpers import PROJECT, cheap_offer

from launchpad.errors import NotYetTerminated
from launchpad.models import JOB_TAG, InstanceSpec, InstanceState, TeardownMode

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


def _spec(job="job-a", token="job-a-1", **kw):
    return InstanceSpec(job_id=job, token=token, tags={JOB_TAG: job}, **kw)


def _inserts(gce):
    return [body for method, path, body in gce.requests if method == "POST" and path.endswith("/instances")]


def _meta(body, key):
    return next(i["value"] for i in body["metadata"]["items"] if i["key"] == key)


def test_check_names_the_project_and_zones(gcp):
    assert gcp.check() is None
    assert gcp.describe().startswith(f"project {PROJECT}: 6 zones in 4 regions: europe-west4, us-central1")


def test_check_without_credentials_names_the_fix(gcp_config, monkeypatch, tmp_path):
    from launchpad_gcp import GCPProvider

    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))  # no `gcloud auth application-default login`
    from google.auth.compute_engine import _metadata

    monkeypatch.setattr(_metadata, "_NO_GCE_CHECK", True)  # NO_GCE_CHECK=true, read at import: not on GCE
    reason = GCPProvider(gcp_config).check()
    assert reason and "no Google Cloud credentials" in reason and "gcloud auth application-default login" in reason
    assert "\n" not in reason


def test_offers_are_the_catalog_in_the_enabled_zones(gcp):
    offers = gcp.offers()
    assert offers and {o.zone for o in offers} <= set(gcp.zones())
    kinds = {o.instance_type.split("-")[0] for o in offers}
    assert {"a2", "a3", "g2", "n1"} <= kinds  # A2/A3/G2/N1+GPU
    assert all(o.gpu for o in offers)


def test_insert_labels_everything_and_carries_key_script_and_shape(gcp, gce, gcp_config):
    offer = cheap_offer(gcp)
    inst = gcp.provision(offer, _spec(disk_gb=300))
    [body] = _inserts(gce)
    labels = body["labels"]
    assert labels[JOB_TAG] == "job-a" and labels["launchpad-cluster"] == "job-a-1" and labels["launchpad-node"] == "0"
    assert body["disks"][0]["initializeParams"]["labels"] == labels  # the boot disk is labelled too
    assert body["disks"][0]["initializeParams"]["diskSizeGb"] == "300" and body["disks"][0]["autoDelete"] is True
    assert body["machineType"] == f"zones/{offer.zone}/machineTypes/{offer.instance_type}"
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE" and body["scheduling"]["provisioningModel"] == "STANDARD"
    public = open(gcp_config["key"] + ".pub").read().strip()
    assert _meta(body, "ssh-keys") == f"{getpass.getuser()}:{public}" or _meta(body, "ssh-keys").endswith(public)
    assert "enable-linger" in _meta(body, "startup-script") and _meta(body, "enable-guest-attributes") == "TRUE"
    assert _meta(body, JOB_TAG) == "job-a"
    # the request id makes a retried insert the same insert
    [(_, path, _)] = [r for r in gce.requests if r[0] == "POST" and r[1].endswith("/instances")]
    assert inst.id == body["name"] and inst.id.startswith("lp-") and inst.state is InstanceState.RUNNING
    # SSH only from the configured address, to VMs with the rule's network tag
    ssh_rules = [r for n, r in gce.firewalls.items() if n.startswith("launchpad-ssh-")]
    assert [r["sourceRanges"] for r in ssh_rules] == [["127.0.0.1/32"]]
    assert ssh_rules[0]["targetTags"][0] in body["tags"]["items"] and "launchpad-internal" in gce.firewalls
    assert inst.data["disk_gb"] == 300  # status bills the boot disk, also while stopped
    # a second job reuses the firewall rules
    inst2 = gcp.provision(offer, _spec("job-b", "job-b-1"))
    assert len(gce.firewalls) == 2
    for i in (inst, inst2):
        gcp.teardown(i)
    assert gce.live() == []


def test_the_startup_script_is_valid_shell_with_the_user_quoted():
    from launchpad_gcp.project import startup_script

    script = startup_script("o'brien; rm -rf /")
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert "user='o'\"'\"'brien; rm -rf /'" in script


def test_provision_twice_with_one_token_is_one_vm(gcp, gce):
    offer = cheap_offer(gcp)
    a = gcp.provision(offer, _spec())
    b = gcp.provision(offer, _spec())
    assert a.id == b.id and len(gce.live()) == 1 and len(_inserts(gce)) == 1
    gcp.teardown(a)


def test_an_insert_whose_answer_was_lost_is_not_run_twice(gcp, gce):
    """The client died after GCE accepted the insert: the same attempt again finds the VM by its name."""
    offer = cheap_offer(gcp)
    spec = _spec()
    first = gcp.provision(offer, spec)
    gce.instances[next(iter(gce.instances))]["labels"].pop(JOB_TAG)  # not found by label: only the name is left
    again = gcp.provision(offer, spec)
    assert again.id == first.id and len(gce.live()) == 1
    gcp.teardown(again)


def test_a_stopped_vm_of_the_job_is_started_and_reused(gcp, gce):
    offer = cheap_offer(gcp)
    inst = gcp.provision(offer, _spec())
    gcp.teardown(inst, TeardownMode.STOP)
    assert gcp.status(inst) is InstanceState.STOPPED
    again = gcp.provision(offer, _spec(token="job-a-2"))  # the next attempt of the same job
    assert again.id == inst.id and gcp.status(again) is InstanceState.RUNNING and len(gce.live()) == 1
    gcp.teardown(again)


def test_spot_scheduling_and_preemption_is_preempted(gcp, gce):
    offer = cheap_offer(gcp, spot=True)
    inst = gcp.provision(offer, _spec())
    [body] = _inserts(gce)
    assert body["scheduling"] == {"onHostMaintenance": "TERMINATE", "provisioningModel": "SPOT",
                                  "instanceTerminationAction": "DELETE", "automaticRestart": False}
    assert gcp.job_spec_extras(inst)["preemption"] == ["gcp"]
    assert gcp.status(inst) is InstanceState.RUNNING
    gce.preempt(inst.id)
    assert gcp.status(inst) is InstanceState.PREEMPTED
    gcp.teardown(inst)  # already gone: silent


def test_spot_that_stops_on_preemption_is_preempted_not_stopped(gcp, gce, gcp_config):
    from launchpad_gcp import GCPProvider

    provider = GCPProvider({**gcp_config, "spot_termination": "stop"})
    inst = provider.provision(cheap_offer(provider, spot=True), _spec())
    gce.preempt(inst.id)
    assert [i["status"] for i in gce.live()] == ["TERMINATED"]
    assert provider.status(inst) is InstanceState.PREEMPTED
    provider.teardown(inst)
    assert gce.live() == []


def test_n1_gets_its_gpu_as_an_accelerator_and_nvme_a_local_ssd(gcp, gce):
    n1 = [o for o in gcp.offers() if o.instance_type.startswith("n1-") and o.gpu == "T4" and o.gpu_count == 1]
    inst = gcp.provision(n1[0], _spec(disk="nvme"))
    [body] = _inserts(gce)
    assert body["guestAccelerators"] == [{"acceleratorType": f"zones/{n1[0].zone}/acceleratorTypes/nvidia-tesla-t4",
                                          "acceleratorCount": 1}]
    assert [d["interface"] for d in body["disks"] if d["type"] == "SCRATCH"] == ["NVME"]
    extras = gcp.job_spec_extras(inst)
    assert extras["mount_nvme"] and extras["expect_nvme"]
    gcp.teardown(inst)


def test_multi_node_jobs_get_one_vm_per_rank_and_their_private_addresses(gcp, gce):
    inst = gcp.provision(cheap_offer(gcp), _spec(nodes=2))
    assert len(gce.live()) == 2 and [n["rank"] for n in inst.data["nodes"]] == [0, 1]
    extras = gcp.job_spec_extras(gcp.nodes(inst)[1])
    assert extras["node_rank"] == 1 and extras["master_addr"] == inst.data["nodes"][0]["private"]
    [found] = [i for i in gcp.instances() if i.job_id == "job-a"]
    assert [n["id"] for n in found.data["nodes"]] == [n["id"] for n in inst.data["nodes"]]
    gcp.teardown(inst)
    assert gce.live() == []


def test_found_by_label_with_the_exact_job_id_when_it_is_too_long_for_a_label(gcp, gce):
    job = "a-very-long-recipe-name-that-fills-the-whole-sixty-three-chars-x-1a2b3c"
    inst = gcp.provision(cheap_offer(gcp), _spec(job, f"{job}-aa"))
    [found] = gcp.instances()
    assert found.job_id == job and found.id == inst.id and len(found.offer.instance_type) > 0
    assert len(gce.live()[0]["labels"][JOB_TAG]) <= 63
    gcp.teardown(found)
    assert gcp.instances() == []


def test_teardown_that_is_accepted_but_not_done_says_not_yet(gcp, gce):
    inst = gcp.provision(cheap_offer(gcp), _spec())
    gce.delete_seconds = 1.0  # the delete runs for a while
    with pytest.raises(NotYetTerminated):
        gcp.teardown(inst)
    with pytest.raises(NotYetTerminated):
        gcp.teardown(inst)  # asked again while it runs: still accepted, not done
    time.sleep(1.1)
    gcp.teardown(inst)
    assert gce.live() == [] and gcp.status(inst) is InstanceState.TERMINATED


def test_the_host_key_is_pinned_from_the_guest_attributes(gcp, vm_sshd):
    inst = gcp.provision(cheap_offer(gcp), _spec())
    target = gcp.ssh_target(inst)
    assert target.host_key == vm_sshd.host_key_line() and target.host == "127.0.0.1"
    assert gcp.connection(inst).run(["true"]).rc == 0
    gcp.teardown(inst)


def test_the_default_checkpoint_store_is_a_bucket_in_the_vms_region(gcp, gcs):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    inst = gcp.provision(cheap_offer(gcp), _spec())
    uri = gcp.checkpoint_uri_for(inst)
    assert uri == f"gs://launchpad-{PROJECT}-{inst.data['region']}/checkpoints"
    assert gcp.checkpoint_uri_for(inst) == uri  # made once
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    assert client.get_bucket(uri.split("/")[2]).name == uri.split("/")[2]
    gcp.teardown(inst)


def test_autostop_terminate_deletes_the_vm_through_the_api_with_its_own_token(gcp, gce):
    """What the idle watchdog runs on the VM for `autostop.action: terminate`: the metadata server's token
    for the VM's service account, then instances.delete (a guest shutdown would only stop it)."""
    inst = gcp.provision(cheap_offer(gcp), _spec(autostop_action=TeardownMode.TERMINATE))
    command = gcp.job_spec_extras(inst)["autostop"]["command"]
    command = [sys.executable, *command[1:]]  # the venv's python on a real VM
    env = {**os.environ, "GCE_METADATA_HOST": gce.url.removeprefix("http://")}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert gce.live() == [] and any(m == "DELETE" for m, _, _ in gce.requests)


def test_autostop_stop_halts_the_guest(gcp):
    inst = gcp.provision(cheap_offer(gcp), _spec())
    autostop = gcp.job_spec_extras(inst)["autostop"]
    assert autostop["action"] == "stop" and autostop["command"][0] == "touch"  # the tests' shutdown_command
    spot = gcp.provision(replace(cheap_offer(gcp), spot=True), _spec("job-s", "job-s-1"))
    assert gcp.job_spec_extras(spot)["autostop"]["action"] == "stop"
    for i in (inst, spot):
        gcp.teardown(i)
