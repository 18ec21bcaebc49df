"""Provisioning on the Vast.ai double: offers with each host's own figures, the image by the host's driver,
the label, idempotence (also after a lost answer), a rented-away offer, interruptible bids and outbidding,
stop/start, discovery by label, the pinned host key, the idle self-stop."""

from __future__ import annotations

import base64
import subprocess
import sys
from dataclasses import replace

import pytest
from vast_helpers import A6000, H100, OLD_DRIVER, RELIABLE, SHAKY, offer_on

from launchpad.errors import BadInput, NoCapacity
from launchpad.models import JOB_TAG, InstanceSpec, InstanceState, TeardownMode

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


def _spec(job="job-a", token="job-a-1", **kw):
    return InstanceSpec(job_id=job, token=token, tags={JOB_TAG: job}, **kw)


def _rents(api):
    return [(path, body) for method, path, body in api.requests if method == "PUT" and "/asks/" in path]


def test_offers_carry_each_hosts_own_figures(vast):
    offers = {o.zone: o for o in vast.offers()}
    assert set(offers) == {f"machine-{m}" for m in (RELIABLE, SHAKY, A6000, OLD_DRIVER, H100)}
    good = offers[f"machine-{RELIABLE}"]
    assert (good.instance_type, good.gpu, good.gpu_count, good.gpu_memory_gb) == ("1x-RTX_4090", "RTX4090", 1, 24.0)
    storage = 0.15 * 50 / 720  # the host's storage_cost ($/GB-month) for the 50 GB searched with, per hour
    assert good.region == "Sweden, SE" and good.price_per_hour == pytest.approx(0.40 + storage, abs=1e-4)
    assert good.spot_price_per_hour == pytest.approx(0.22 + storage, abs=1e-4)  # min_bid 0.20 + 10%: the bid placed
    assert (good.reliability, good.disk_mb_s, good.inet_down_mbps, good.host_cuda_max) == (0.995, 2500.0, 900.0, "12.8")
    assert good.cuda == "12.8"  # the newest image this driver runs
    assert offers[f"machine-{SHAKY}"].reliability == 0.80
    assert offers[f"machine-{A6000}"].spot_price_per_hour is None and offers[f"machine-{A6000}"].cuda == "12.4"
    assert offers[f"machine-{OLD_DRIVER}"].cuda is None  # no image on the list runs on CUDA 11.2
    assert offers[f"machine-{H100}"].gpu == "H100" and offers[f"machine-{H100}"].cuda == "12.9"


def test_the_search_asks_for_rentable_verified_reliable_hosts(vast_config, vast_api):
    from launchpad_vast import VastProvider

    vast = VastProvider({k: v for k, v in vast_config.items() if k != "min_reliability"})
    assert f"machine-{SHAKY}" not in {o.zone for o in vast.offers()}  # under the default floor of 0.9
    (body,) = [b for m, p, b in vast_api.requests if m == "POST" and p.startswith("/api/v0/bundles/")]
    assert body["rentable"] == {"eq": True} and body["verified"] == {"eq": True} and body["rented"] == {"eq": False}
    assert body["reliability"] == {"gte": 0.9} and body["type"] == "on-demand"
    assert body["order"] == [["dph_total", "asc"]]


def test_an_unreachable_search_plans_on_the_bundled_snapshot(vast, vast_api, monkeypatch):
    from launchpad.planner.catalog import catalog_offers

    monkeypatch.setenv("LAUNCHPAD_VAST_RETRIES", "2")
    vast_api.fail_next("POST", "/bundles/", 503, "Service Unavailable", times=2)
    assert vast.offers() == catalog_offers("vast")
    assert sum(1 for m, p, _ in vast_api.requests if p.startswith("/api/v0/bundles/")) == 2  # retried, bounded


@pytest.mark.parametrize("machine_id, image", [
    (RELIABLE, "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"),  # driver 12.8
    (A6000, "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"),  # driver 12.4: 12.6+ would not start
    (H100, "pytorch/pytorch:2.8.0-cuda12.9-cudnn9-runtime"),
])
def test_the_image_is_the_newest_the_hosts_driver_runs(vast, vast_api, machine_id, image):
    inst = vast.provision(offer_on(vast, machine_id), _spec(disk_gb=80))
    ((path, body),) = _rents(vast_api)
    assert body["image"] == image and inst.data["image"] == image
    assert body["runtype"] == "ssh" and body["disk"] == 80 and "price" not in body
    assert body["label"] == "launchpad job=job-a cluster=job-a-1 node=0"


def test_a_host_whose_driver_runs_no_image_is_no_capacity_for_that_offer(vast, vast_api):
    with pytest.raises(NoCapacity) as e:
        vast.provision(offer_on(vast, OLD_DRIVER), _spec())
    assert e.value.scope == "offer" and "CUDA" in str(e.value) and "11.2" in str(e.value)
    assert _rents(vast_api) == [] and vast_api.live() == []


def test_a_cuda_need_above_what_the_hosts_driver_runs_is_no_capacity_at_provision_too(vast, vast_api):
    """The lifecycle passes `resources.cuda` in the spec: provision checks it itself, not only the planner."""
    with pytest.raises(NoCapacity) as e:
        vast.provision(offer_on(vast, RELIABLE), _spec(cuda="99.0"))
    assert e.value.scope == "offer" and "CUDA 99.0" in str(e.value)
    assert _rents(vast_api) == []


def test_the_recipes_cuda_need_rules_out_hosts_whose_newest_image_is_older(vast, tmp_path):
    import yaml

    from launchpad.planner import plan
    from launchpad.recipe import load_recipe

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "base_model": "builtin:tiny-llama", "adapter": "lora",
                                    "datasets": [{"path": "tatsu-lab/alpaca", "type": "alpaca"}], "max_steps": 10,
                                    "resources": {"cuda": "12.6"}}))
    p = plan(load_recipe(path), {"vast": vast}, {}, include_catalog=False)
    ranked = {r.offer.zone for r in p.ranked}
    assert f"machine-{A6000}" not in ranked and {f"machine-{RELIABLE}", f"machine-{H100}"} <= ranked
    why = {r.offer.zone: r.reason for r in p.rejected}
    assert "12.4" in why[f"machine-{A6000}"] and "12.6" in why[f"machine-{A6000}"]
    # the host with no image at all cannot be told apart here: provision skips it (the test above)
    assert f"machine-{OLD_DRIVER}" in ranked


def test_the_planner_prefers_the_reliable_host_over_the_slightly_cheaper_shaky_one(vast, tmp_path):
    import yaml

    from launchpad.planner import plan
    from launchpad.recipe import load_recipe

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "base_model": "builtin:tiny-llama", "adapter": "lora",
                                    "datasets": [{"path": "tatsu-lab/alpaca", "type": "alpaca"}], "max_steps": 10,
                                    "resources": {"gpu": "RTX4090"}}))
    p = plan(load_recipe(path), {"vast": vast}, {}, include_catalog=False)
    assert [r.offer.zone for r in p.ranked] == [f"machine-{RELIABLE}", f"machine-{SHAKY}"]
    first, second = p.ranked
    assert first.offer.price > second.offer.price
    assert (first.scores["hardware_availability"], second.scores["hardware_availability"]) == (0.995, 0.80)


def test_provision_is_idempotent_on_the_token_and_registers_the_key_once(vast, vast_api):
    offer = offer_on(vast, RELIABLE)
    first = vast.provision(offer, _spec())
    again = vast.provision(offer, _spec())
    assert again.id == first.id and len(_rents(vast_api)) == 1 and len(vast_api.live()) == 1
    other = vast.provision(offer_on(vast, H100), _spec(token="job-a-2"))
    assert other.id != first.id
    posts = [b for m, p, b in vast_api.requests if m == "POST" and p.startswith("/api/v0/ssh/")]
    assert len(posts) == 1 and posts[0]["ssh_key"].startswith("ssh-ed25519 ")
    assert [k["public_key"] for k in vast_api.ssh_keys] == [posts[0]["ssh_key"]]


def test_a_rent_whose_answer_was_lost_is_found_by_label_not_rented_twice(vast, vast_api):
    vast_api.fail_next("PUT", "/asks/", 504, "Gateway Timeout", lose_answer=True)
    inst = vast.provision(offer_on(vast, RELIABLE), _spec())
    assert len(_rents(vast_api)) == 1 and [i["id"] for i in vast_api.live()] == [int(inst.id)]


def test_an_offer_rented_away_is_no_capacity_for_that_offer(vast, vast_api):
    offer = offer_on(vast, RELIABLE)
    vast_api.rent_away(RELIABLE)  # after the plan, before the rent
    with pytest.raises(NoCapacity) as e:
        vast.provision(offer, _spec())
    assert e.value.scope == "offer" and _rents(vast_api) == []
    # the race: listed at our search, rented by someone else a moment before our rent
    offer = offer_on(vast, H100)
    vast_api.taken_at_rent(H100)
    with pytest.raises(NoCapacity) as e:
        vast.provision(offer, _spec())
    assert e.value.scope == "offer" and "rented by someone else" in str(e.value)
    assert vast_api.live() == []


def _submit(vast, launchpad_home, tmp_path, **resources):
    from pathlib import Path

    import yaml

    from launchpad.lifecycle import Lifecycle
    from launchpad.recipe import load_recipe
    from launchpad.state import StateDB

    repo = Path(__file__).resolve().parents[3]
    data = yaml.safe_load((repo / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(repo / "recipes" / "data" / "smoke-chat.jsonl")
    data["resources"] = resources
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    lc = Lifecycle(StateDB(launchpad_home / "state.db"), {"vast": vast})
    return lc, lc.submit(load_recipe(path), path.read_text(), provider="vast")


def test_the_lifecycle_moves_to_the_next_offer_when_one_runs_no_image_or_is_rented_away(vast, vast_api,
                                                                                        launchpad_home, tmp_path):
    """The real lifecycle's provisioning (no training): the cheapest host runs no image, the next two are rented
    by someone else between the plan and the rent; the one after is rented."""
    lc, job = _submit(vast, launchpad_home, tmp_path)  # any GPU
    vast_api.taken_at_rent(RELIABLE)
    vast_api.taken_at_rent(SHAKY)
    inst = lc._ensure_instance(lc.db.job(job))
    failed = [e["data"] for e in lc.db.events(job) if e["kind"] == "provision:failed"]
    assert [f["scope"] for f in failed] == ["offer", "offer", "offer"]
    assert f"machine-{OLD_DRIVER}" in failed[0]["offer"] and "CUDA" in failed[0]["reason"]
    assert {f["offer"].split("machine-")[1][:3] for f in failed[1:]} == {str(RELIABLE), str(SHAKY)}
    assert all("rented by someone else" in f["reason"] for f in failed[1:])
    assert inst.offer is not None and inst.offer.zone == f"machine-{A6000}"  # the next cheapest
    assert [i["machine_id"] for i in vast_api.live()] == [A6000]
    vast.teardown(inst)


def test_interruptible_rentals_bid_and_an_outbid_instance_is_preempted(vast, vast_api):
    inst = vast.provision(offer_on(vast, RELIABLE, spot=True), _spec())
    ((_, body),) = _rents(vast_api)
    assert body["price"] == pytest.approx(0.22)  # min_bid + 10%
    assert inst.data["spot"] is True and vast.status(inst) is InstanceState.RUNNING
    vast_api.outbid(int(inst.id))
    assert vast.status(inst) is InstanceState.PREEMPTED
    vast.teardown(inst)  # what the lifecycle does with a lost instance: the paused one stops billing
    assert vast.status(inst) is InstanceState.TERMINATED and vast_api.live() == []
    with pytest.raises(NoCapacity):  # no interruptible market on that host
        vast.provision(replace(offer_on(vast, A6000), spot=True), _spec(token="job-a-2"))


def test_stop_keeps_the_instance_and_a_second_provision_starts_it(vast, vast_api):
    offer = offer_on(vast, RELIABLE)
    inst = vast.provision(offer, _spec())
    vast.teardown(inst, TeardownMode.STOP)
    vast.teardown(inst, TeardownMode.STOP)  # idempotent
    assert vast.status(inst) is InstanceState.STOPPED and len(vast_api.live()) == 1
    again = vast.provision(offer, _spec())
    assert again.id == inst.id and vast.status(again) is InstanceState.RUNNING
    vast.teardown(inst)
    vast.teardown(inst)  # gone: silent
    assert vast_api.live() == []


def test_instances_are_found_by_label_alone(vast_config, vast_api, vast):
    from launchpad_vast import VastProvider

    a = vast.provision(offer_on(vast, RELIABLE), _spec("job-x", "job-x-1"))
    b = vast.provision(offer_on(vast, H100, spot=True), _spec("job-y", "job-y-7"))
    # somebody's own instance on the same account, not launchpad's
    vast_api.rent(vast_api.machines[A6000]["_ask"], {"image": "vastai/base-image", "label": "my notebook"})
    fresh = VastProvider(vast_config)  # nothing local: a new machine, the state DB gone
    found = {i.id: i for i in fresh.instances()}
    assert set(found) == {a.id, b.id}
    assert (found[a.id].job_id, found[a.id].data["token"]) == ("job-x", "job-x-1")
    assert found[b.id].offer.spot and found[b.id].offer.zone == f"machine-{H100}"
    assert found[a.id].data["host_key"] == a.data["host_key"] and a.data["host_key"].startswith("ssh-ed25519 ")


def test_the_host_key_launchpad_made_is_the_one_pinned(vast_config, vast_api, vast_sshd, tmp_path):
    """What the onstart script does on a real instance, done here by hand: the sshd that plays the instance
    gets the host key from the instance's env. Unpinned by config, the provider then connects to that sshd,
    and refuses the session sshd (another key)."""
    from launchpad_vast import VastProvider
    from launchpad_vast.instance import HOST_KEY_ENV, HOST_KEY_PUB_ENV, env_of

    from launchpad.ssh.hostkeys import HostKeyChanged
    from launchpad.testing_ssh import LoopbackSshd

    cfg = {k: v for k, v in vast_config.items() if k != "host_key"}
    provider = VastProvider(cfg)
    inst = provider.provision(offer_on(provider, RELIABLE), _spec())
    env = env_of(vast_api.instances[int(inst.id)])
    assert "BEGIN OPENSSH PRIVATE KEY" in base64.b64decode(env[HOST_KEY_ENV]).decode()
    assert HOST_KEY_ENV not in str(inst.to_dict())  # the private half is never kept by launchpad
    own = LoopbackSshd(tmp_path / "own-sshd", name="own", authorized_keys=vast_sshd.dir / "authorized_keys")
    own.dir.mkdir(parents=True)
    own.host_key_file.write_bytes(base64.b64decode(env[HOST_KEY_ENV]))
    own.host_key_file.chmod(0o600)
    (own.dir / "ssh_host_ed25519_key.pub").write_text(env[HOST_KEY_PUB_ENV] + "\n")
    own.start()
    try:
        vast_api.instances[int(inst.id)]["ssh_port"] = own.port
        assert provider.progress(inst).step == 0  # connected, the pinned key matched
        provider.drop_connection(inst)
        vast_api.instances[int(inst.id)]["ssh_port"] = vast_sshd.port  # an sshd with another key
        with pytest.raises(HostKeyChanged):
            provider.progress(inst)
    finally:
        own.stop()
        provider.close()


def test_the_idle_machine_stops_itself_with_its_container_key(vast, vast_api):
    from launchpad_vast.instance import SELF_STOP

    inst = vast.provision(offer_on(vast, RELIABLE), _spec())
    extras = vast.job_spec_extras(inst)
    cmd = extras["autostop"]["command"]
    assert extras["preemption"] == [] and cmd[2] == SELF_STOP and cmd[3:] == [vast.url(), inst.id, "stop"]
    env = {"PATH": "/usr/bin:/bin"}
    denied = subprocess.run([sys.executable, "-c", SELF_STOP, vast.url(), inst.id, "stop"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert denied.returncode != 0 and "CONTAINER_API_KEY" in denied.stderr
    env["CONTAINER_API_KEY"] = vast_api.container_key(int(inst.id))  # what Vast puts in the container
    subprocess.run([sys.executable, "-c", SELF_STOP, vast.url(), inst.id, "stop"], env=env, check=True, timeout=60)
    assert vast.status(inst) is InstanceState.STOPPED


def test_no_checkpoint_store_is_a_clear_bad_input(vast_config):
    from launchpad_vast import VastProvider

    provider = VastProvider({k: v for k, v in vast_config.items() if k != "checkpoint_uri"})
    assert provider.default_checkpoint_uri() is None
    with pytest.raises(BadInput) as e:
        provider.checkpoint_uri_for(None)  # type: ignore[arg-type]
    assert "no object store" in str(e.value) and "checkpoint.uri" in str(e.value) and "\n" not in str(e.value)
