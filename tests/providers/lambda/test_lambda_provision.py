"""Provisioning on the Lambda API double: live offers by capacity (the catalog when the API is away), the SSH
key registered once, names that find instances without local state, idempotent launches (also when the
launch's answer was lost), the boot wait, trust-on-first-use host keys pinned per instance, teardown,
status, multi-node, `down --all` with no state DB, and the idle watchdog's self-terminate."""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
import time

import pytest
from lambda_helpers import API_KEY, cheap_offer

from launchpad.errors import NotYetTerminated
from launchpad.models import JOB_TAG, InstanceSpec, InstanceState, TeardownMode

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


def _spec(job="job-a", token="job-a-1f2e3d4c", **kw):
    return InstanceSpec(job_id=job, token=token, tags={JOB_TAG: job}, **kw)


def test_check_and_describe_say_what_is_usable(lambda_provider):
    assert lambda_provider.check() is None
    assert lambda_provider.describe() == ("5 instance types in 4 regions with capacity now; key from LAMBDA_API_KEY; "
                                          "checkpoints to s3://lp-lambda-checkpoints/launchpad")


def test_offers_are_the_types_with_capacity_per_region(lambda_provider, lambda_config):
    from launchpad_lambda import LambdaProvider

    offers = {(o.instance_type, o.region): o for o in lambda_provider.offers()}
    assert set(offers) == {("cpu_4x_generalx", "us-east-1"), ("gpu_1x_a10", "us-east-1"), ("gpu_1x_a10", "us-west-1"),
                           ("gpu_1x_a100_sxm4", "us-west-1"), ("gpu_1x_h100_pcie", "us-west-3"),
                           ("gpu_2x_a6000", "europe-central-1")}  # the sold-out 8x H100 is not offered
    a6000 = offers[("gpu_2x_a6000", "europe-central-1")]
    assert (a6000.gpu, a6000.gpu_count, a6000.gpu_memory_gb, a6000.price_per_hour) == ("A6000", 2, 48.0, 2.18)
    assert a6000.vcpus == 28 and a6000.memory_gb == 214.7 and a6000.nvme_gb == 1100 and not a6000.spot
    cpu = offers[("cpu_4x_generalx", "us-east-1")]
    assert cpu.gpu is None and cpu.gpu_count == 0 and cpu.price_per_hour == 0.2
    narrowed = LambdaProvider({**lambda_config, "regions": ["us-*"]}).offers()
    assert {o.region for o in narrowed} == {"us-east-1", "us-west-1", "us-west-3"}


def test_without_the_api_the_bundled_catalog_is_offered(lambda_config, monkeypatch):
    from launchpad_lambda import LambdaProvider

    from launchpad.planner.catalog import catalog_offers
    from launchpad.testing_ssh import free_port

    monkeypatch.setenv("LAUNCHPAD_LAMBDA_RETRIES", "1")
    provider = LambdaProvider({**lambda_config, "api_url": f"http://127.0.0.1:{free_port()}/api/v1"})
    assert provider.check() is None  # unreachable now is not unusable: a rejected key is (test_lambda_errors)
    assert provider.offers() == catalog_offers("lambda") and len(provider.offers()) > 300
    assert "regions from the bundled catalog: the API is not reachable;" in provider.describe()


def test_launch_names_the_job_attempt_and_rank_and_registers_the_key_once(lambda_provider, lambda_env, lambda_config):
    from launchpad_lambda import LambdaProvider, parse_name

    offer = cheap_offer(lambda_provider, gpu="A10")
    inst = lambda_provider.provision(offer, _spec())
    [body] = lambda_env.launches()
    public = " ".join(open(lambda_config["key"] + ".pub").read().split()[:2])
    [key] = lambda_env.ssh_keys
    assert key["public_key"] == public and key["name"].startswith("launchpad-") and body["ssh_key_names"] == [key["name"]]
    assert (body["region_name"], body["instance_type_name"], body["quantity"]) == (offer.region, "gpu_1x_a10", 1)
    assert body["tags"] == [{"key": JOB_TAG, "value": "job-a"}] and len(body["name"]) <= 64
    parsed = parse_name(body["name"])
    assert parsed and parsed["job"] == "job-a" and parsed["rank"] == 0 and abs(parsed["created"] - time.time()) < 60
    assert inst.id == lambda_env.live()[0]["id"] and inst.state is InstanceState.RUNNING and inst.address
    # another job and another process (a new provider object) reuse the registered key
    other = LambdaProvider(lambda_config).provision(offer, _spec("job-b", "job-b-1"))
    assert len(lambda_env.ssh_keys) == 1 and len([r for r in lambda_env.requests if r[:2] == ("POST", "/api/v1/ssh-keys")]) == 1
    for i in (inst, other):
        lambda_provider.teardown(i)
    assert lambda_env.live() == []


def test_provision_twice_with_one_token_is_one_instance(lambda_provider, lambda_env):
    offer = cheap_offer(lambda_provider)
    a = lambda_provider.provision(offer, _spec())
    b = lambda_provider.provision(offer, _spec())
    assert a.id == b.id and len(lambda_env.live()) == 1 and len(lambda_env.launches()) == 1
    lambda_provider.teardown(a)


def test_a_launch_whose_answer_was_lost_is_not_run_twice(lambda_provider, lambda_env):
    """Lambda launched it but the answer never arrived (a 502 on the way back): the retry lists the instances
    first, finds it by its name and launches nothing more."""
    lambda_env.fail_next("POST", "/instance-operations/launch", 502, "", "Bad Gateway", after=True)
    inst = lambda_provider.provision(cheap_offer(lambda_provider), _spec())
    assert len(lambda_env.launches()) == 1 and [i["id"] for i in lambda_env.live()] == [inst.id]
    lambda_provider.teardown(inst)


def test_a_long_job_id_is_cut_in_the_name_and_exact_from_the_tag(lambda_provider, lambda_env):
    job = "a-recipe-with-a-very-long-name-indeed-for-testing-" + "x" * 30 + "-3f9a1c"
    inst = lambda_provider.provision(cheap_offer(lambda_provider), _spec(job, f"{job}-0a0b0c0d"))
    [name] = [i["name"] for i in lambda_env.live()]
    assert len(name) <= 64 and "~" in name
    assert [i.job_id for i in lambda_provider.instances()] == [job]
    again = lambda_provider.provision(cheap_offer(lambda_provider), _spec(job, f"{job}-0a0b0c0d"))
    assert again.id == inst.id and len(lambda_env.launches()) == 1
    lambda_provider.teardown(inst)


def test_sync_waits_for_the_boot_and_pins_the_host_key_on_first_use(lambda_provider, lambda_env, instance_sshd):
    from launchpad.ssh.hostkeys import HostKeyChanged

    lambda_env.boot_seconds = 0.6
    inst = lambda_provider.provision(cheap_offer(lambda_provider), _spec())
    assert inst.state is InstanceState.PENDING and inst.address is None
    assert lambda_provider.status(inst) is InstanceState.PENDING
    t0 = time.monotonic()
    assert lambda_provider.progress(inst).step == 0  # the first command: waits for active + IP, then connects
    assert time.monotonic() - t0 >= 0.4
    pinned = lambda_provider._known_hosts_path(inst.id)
    assert instance_sshd.host_key_line() in pinned.read_text() and "[127.0.0.1]" in pinned.read_text()
    # a changed key is refused, never re-trusted
    lambda_provider.close()
    other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    pinned.write_text(f"[127.0.0.1]:{instance_sshd.port} {other}\n")
    with pytest.raises(HostKeyChanged):
        lambda_provider.progress(inst)
    lambda_provider.teardown(inst)
    assert not pinned.exists()  # forgotten with the instance: the next one at that address is another machine


def test_teardown_waits_for_terminating_and_is_silent_when_gone(lambda_provider, lambda_env):
    lambda_env.terminate_seconds = 0.5
    inst = lambda_provider.provision(cheap_offer(lambda_provider), _spec())
    with pytest.raises(NotYetTerminated):
        lambda_provider.teardown(inst)
    assert lambda_provider.status(inst) is InstanceState.TERMINATED and lambda_provider.instances() == []
    time.sleep(0.6)
    lambda_provider.teardown(inst)
    lambda_provider.teardown(inst)  # gone: silent
    terminates = [b for m, p, b in lambda_env.requests if p.endswith("/terminate")]
    assert terminates == [{"instance_ids": [inst.id]}]  # never asked twice


def test_stop_terminates_because_lambda_cannot_stop(lambda_provider, lambda_env, caplog):
    from launchpad.models import Capability

    assert not lambda_provider.supports(Capability.STOP) and not lambda_provider.supports(Capability.SPOT)
    inst = lambda_provider.provision(cheap_offer(lambda_provider), _spec())
    lambda_provider.teardown(inst, TeardownMode.STOP)
    assert lambda_env.live() == [] and "cannot be stopped, only terminated" in caplog.text


def test_status_follows_the_api(lambda_provider, lambda_env):
    inst = lambda_provider.provision(cheap_offer(lambda_provider), _spec())
    assert lambda_provider.status(inst) is InstanceState.RUNNING
    lambda_env.instances[inst.id]["status"] = "unhealthy"  # STAND-IN: Lambda's health checks failing
    assert lambda_provider.status(inst) is InstanceState.UNKNOWN  # may still bill: never called gone
    lambda_env.host_failure(inst.id)
    assert lambda_provider.status(inst) is InstanceState.TERMINATED
    lambda_provider.teardown(inst)  # already gone: silent


def test_two_nodes_are_two_named_instances_found_as_one_job(lambda_provider, lambda_env):
    inst = lambda_provider.provision(cheap_offer(lambda_provider), _spec(nodes=2))
    assert [n["rank"] for n in inst.data["nodes"]] == [0, 1] and len(lambda_env.live()) == 2
    [found] = lambda_provider.instances()
    assert found.id == inst.id and [n["id"] for n in found.data["nodes"]] == [n["id"] for n in inst.data["nodes"]]
    assert found.offer.instance_type == inst.offer.instance_type and found.offer.region == inst.offer.region
    [n0, n1] = lambda_provider.nodes(inst)
    extras = lambda_provider.job_spec_extras(n1)
    assert extras["node_rank"] == 1 and extras["master_addr"] == inst.data["nodes"][0]["private"]
    assert [n["address"] for n in extras["nodes"]] == [n["private"] for n in inst.data["nodes"]]
    assert lambda_provider.provision(cheap_offer(lambda_provider), _spec(nodes=2)).id == inst.id
    assert len(lambda_env.launches()) == 2
    lambda_provider.teardown(inst)
    assert lambda_env.live() == []


def test_down_all_finds_instances_by_name_with_no_state_db(lambda_provider, lambda_env, run_cli, launchpad_home):
    """An `up` provisioned these and its state is gone: `launchpad down --all` finds them by name alone."""
    lambda_provider.provision(cheap_offer(lambda_provider), _spec("orphan-a", "orphan-a-1"))
    lambda_provider.provision(cheap_offer(lambda_provider, gpu="H100"), _spec("orphan-b", "orphan-b-1"))
    assert len(lambda_env.live()) == 2 and not (launchpad_home / "state.db").exists()
    env = {"LAMBDA_API_KEY": API_KEY}
    down = run_cli("down", "--all", "--json", timeout=120, env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert len(json.loads(down.stdout)["terminated"]) == 2 and lambda_env.live() == []
    again = run_cli("down", "--all", "--json", timeout=120, env=env)
    assert again.returncode == 0 and json.loads(again.stdout)["terminated"] == []


def test_the_idle_watchdog_terminates_through_the_api_only_when_asked(lambda_provider, lambda_env, lambda_config):
    from launchpad_lambda import KEY_ON_INSTANCE, LambdaProvider

    inst = lambda_provider.provision(cheap_offer(lambda_provider), _spec())
    extras = lambda_provider.job_spec_extras(inst)
    assert extras["autostop"] == {"command": None, "action": "terminate"}  # by default the key stays here
    assert (extras["mount_nvme"], extras["expect_nvme"], extras["preemption"]) == (False, False, [])
    provider = LambdaProvider({**lambda_config, "self_terminate": True})
    command = provider.job_spec_extras(inst)["autostop"]["command"]
    key_file = f"{provider.workdir(inst)}/{KEY_ON_INSTANCE}"
    assert command[1:3] == ["-c", command[2]] and command[3:] == [lambda_config["api_url"], key_file, inst.id]
    provider.connection(inst).run(["mkdir", "-p", provider.workdir(inst)])
    provider.connection(inst).put_bytes(API_KEY.encode(), key_file, mode=0o600)  # what sync does with self_terminate
    # the agent runs the argv with the venv's python (the same interpreter here)
    subprocess.run([sys.executable, *command[1:]], check=True, timeout=60, capture_output=True)
    assert lambda_env.live() == []
    provider.close()


def test_ssh_user_defaults_to_ubuntu(lambda_config, lambda_env):
    from launchpad_lambda import LambdaProvider

    cfg = {k: v for k, v in lambda_config.items() if k != "ssh_config"}
    provider = LambdaProvider(cfg)
    inst = provider.provision(cheap_offer(provider), _spec())
    target = provider.ssh_target(inst)
    assert target.user == "ubuntu" and target.host.startswith("198.51.100.") and target.host_key is None
    assert LambdaProvider({**cfg, "ssh_user": getpass.getuser()}).ssh_target(inst).user == getpass.getuser()
    provider.teardown(inst)
