"""Provisioning on the RunPod double: what a deploy carries (name, key, image, ports, volume, cloud, bid), idempotence
on the token, discovery by name with the state DB gone then `launchpad down --all`, stop/resume and its billing,
interruptible pods reclaimed -> PREEMPTED, image selection by CUDA need, offers live and from the snapshot, the
API key's sources, host keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from runpod_helpers import cheap_offer

from launchpad.errors import ConfigError, NoCapacity, ProviderError
from launchpad.models import JOB_TAG, InstanceSpec, InstanceState, TeardownMode

pytestmark = [pytest.mark.sshd]


def _spec(job="job-r", token="job-r-1", **kw):
    return InstanceSpec(job_id=job, token=token, tags={JOB_TAG: job}, **kw)


def _env(args):
    return {e["key"]: e["value"] for e in args["env"]}


def test_check_and_describe(runpod):
    assert runpod.check() is None
    assert runpod.describe() == "account user_launchpad_test (API key from RUNPOD_API_KEY); clouds: secure, community"


def test_no_key_is_one_line_naming_both_places(runpod_config, monkeypatch):
    from launchpad_runpod import RunPodProvider

    monkeypatch.delenv("RUNPOD_API_KEY")
    reason = RunPodProvider(runpod_config).check()
    assert reason and "no RunPod API key" in reason and "RUNPOD_API_KEY" in reason and "config.toml" in reason
    assert "\n" not in reason


def test_the_sdks_credentials_file_is_read(runpod_config, runpod_api, monkeypatch, tmp_path):
    from launchpad_runpod import RunPodProvider

    monkeypatch.delenv("RUNPOD_API_KEY")
    creds = Path(tmp_path / "home" / ".runpod" / "config.toml")
    creds.parent.mkdir(parents=True)
    creds.write_text(f'[default]\napi_key = "{runpod_api.api_key}"\n')  # what `runpod config` writes
    provider = RunPodProvider(runpod_config)
    assert provider.check() is None and str(creds) in (provider.describe() or "")


def test_bad_settings_are_refused_before_any_call(runpod_config, runpod_api):
    from launchpad_runpod import RunPodProvider

    for bad, field in (({"clouds": ["azure"]}, "clouds"), ({"volume_gb": 0}, "volume_gb"),
                       ({"api_url": "api.runpod.io"}, "api_url"), ({"checkpoint_uri": "/tmp/x"}, "checkpoint_uri")):
        provider = RunPodProvider({**runpod_config, **bad})
        assert f"providers.runpod.{field}" in (provider.check() or "")
        with pytest.raises(ConfigError, match=field) as e:
            provider.provision(cheap_offer(RunPodProvider(runpod_config)), _spec())
        assert e.value.exit_code == 2
    assert runpod_api.calls("podFindAndDeployOnDemand") == []


def test_live_offers_map_gpu_types_clouds_and_spot_prices(runpod):
    offers = runpod.offers()
    by = {(o.instance_type, o.region, o.gpu_count): o for o in offers}
    a100 = by[("NVIDIA A100 80GB PCIe", "secure", 2)]
    assert (a100.gpu, a100.gpu_memory_gb, a100.price_per_hour, a100.spot_price_per_hour) == ("A100", 80, 3.28, 1.64)
    assert by[("NVIDIA A100 80GB PCIe", "community", 1)].price_per_hour == 1.19
    assert by[("NVIDIA H100 80GB HBM3", "secure", 8)].gpu == "H100"
    assert not any(k[0].startswith("NVIDIA H100") and k[1] == "community" for k in by)  # secure only
    assert {o.gpu for o in offers} == {"RTX4090", "A6000", "A100", "H100", "RTX6000ADA"}
    assert not any(k[0] == "NVIDIA RTX 6000 Ada Generation" and k[2] == 8 for k in by)  # at most 4 of those
    assert all(o.cuda == "12.8" and not o.spot for o in offers)


def test_secure_only_setting(runpod_config):
    from launchpad_runpod import RunPodProvider

    assert {o.region for o in RunPodProvider({**runpod_config, "clouds": ["secure"]}).offers()} == {"secure"}


def test_unreachable_api_falls_back_to_the_snapshot_else_says_why(runpod_config, tmp_path, monkeypatch):
    import shutil

    from launchpad_runpod import RunPodProvider

    from launchpad.config_dir import configs_dir
    from launchpad.planner import catalog

    dead = {**runpod_config, "api_url": "http://127.0.0.1:9"}  # nothing listens on the discard port
    monkeypatch.setenv("LAUNCHPAD_RUNPOD_RETRIES", "1")
    configs = tmp_path / "configs"
    shutil.copytree(configs_dir(), configs, ignore=shutil.ignore_patterns("*.csv"))
    monkeypatch.setenv("LAUNCHPAD_CONFIGS", str(configs))
    configs_dir.cache_clear()
    catalog._catalog.cache_clear()
    try:
        with pytest.raises(ProviderError, match="no bundled snapshot .*runpod.csv") as e:
            RunPodProvider(dead).offers()
        assert "catalog refresh" in str(e.value)
        (configs / "catalog" / "runpod.csv").write_text(
            "InstanceType,Region,Zone,Gpu,GpuCount,GpuMemoryGB,vCPUs,MemoryGiB,Price,SpotPrice\n"
            "NVIDIA A100 80GB PCIe,EU-RO-1,,A100,1,80,8,117,1.64,\n"
            "NVIDIA GeForce RTX 4090,CA,,RTX4090,1,24,6,41,0.34,\n")
        catalog._catalog.cache_clear()
        offers = RunPodProvider(dead).offers()
        assert [(o.instance_type, o.region) for o in offers] == [("NVIDIA A100 80GB PCIe", "EU-RO-1"),
                                                               ("NVIDIA GeForce RTX 4090", "CA")]
        assert [o.region for o in RunPodProvider({**dead, "clouds": ["community"]}).offers()] == ["CA"]
    finally:
        configs_dir.cache_clear()
        catalog._catalog.cache_clear()


def test_deploy_carries_name_key_image_ports_volume_and_env(runpod, runpod_api, runpod_config):
    offer = cheap_offer(runpod, gpu="NVIDIA A100 80GB PCIe")
    inst = runpod.provision(offer, _spec(disk_gb=120))
    [args] = runpod_api.calls("podFindAndDeployOnDemand")
    assert args["name"] == inst.data["name"] and args["name"].startswith("launchpad-job-r-") and args["name"].endswith("-0")
    assert (args["gpuTypeId"], args["gpuCount"], args["cloudType"]) == ("NVIDIA A100 80GB PCIe", 1, "SECURE")
    assert args["ports"] == "22/tcp" and args["supportPublicIp"] is True and args["startSsh"] is True
    assert args["volumeInGb"] == 120 and args["volumeMountPath"] == "/workspace" and inst.data["disk_gb"] == 120
    assert args["imageName"] == "runpod/pytorch:2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04"
    assert args["allowedCudaVersions"] == ["12.8", "12.9", "13.0"]  # hosts whose driver runs the image's CUDA 12.8
    env = _env(args)
    assert env["PUBLIC_KEY"] == Path(runpod_config["key"] + ".pub").read_text().strip()  # per pod, not account-wide
    assert env["LAUNCHPAD_JOB"] == "job-r" and env["LAUNCHPAD_CLUSTER"] == "job-r-1"
    assert json.loads(env["LAUNCHPAD_TAGS"]) == {JOB_TAG: "job-r"}
    assert runpod_api.calls("updateUserSettings") == []  # the account's own SSH keys are left alone
    assert inst.state is InstanceState.RUNNING and inst.address == "127.0.0.1"
    runpod.teardown(inst)
    assert runpod_api.live() == []


def test_provision_twice_with_one_token_is_one_pod(runpod, runpod_api):
    offer = cheap_offer(runpod)
    a = runpod.provision(offer, _spec())
    b = runpod.provision(offer, _spec())
    assert a.id == b.id and len(runpod_api.live()) == 1 and len(runpod_api.calls("podFindAndDeployOnDemand")) == 1
    runpod.teardown(a)


def test_a_deploy_whose_answer_was_lost_is_not_sent_twice(runpod, runpod_api):
    """RunPod created the pod but the answer never arrived (INJECTED): the retry finds the pod by its name."""
    runpod_api.fail_next("podFindAndDeployOnDemand", "Something went wrong. Please try again later or contact support.",
                         after=True)
    inst = runpod.provision(cheap_offer(runpod), _spec())
    assert len(runpod_api.calls("podFindAndDeployOnDemand")) == 1 and [p["id"] for p in runpod_api.live()] == [inst.id]
    runpod.teardown(inst)


def test_pods_are_found_by_name_after_the_state_db_is_gone_and_down_all_removes_them(runpod, runpod_api, run_cli,
                                                                                       launchpad_home):
    offer = cheap_offer(runpod)
    inst = runpod.provision(offer, _spec("job-found", "job-found-1"))
    spot = runpod.provision(cheap_offer(runpod, spot=True), _spec("job-spot", "job-spot-1"))
    runpod_api._deploy({"name": "my-own-notebook", "gpuTypeId": offer.instance_type, "cloudType": "SECURE"}, False)
    (launchpad_home / "state.db").unlink(missing_ok=True)
    found = {i.id: i for i in runpod.instances()}
    assert set(found) == {inst.id, spot.id}  # not the user's own pod
    assert found[inst.id].job_id == "job-found" and found[inst.id].data["token"] == "job-found-1"
    assert found[inst.id].offer.instance_type == offer.instance_type and found[spot.id].offer.spot is True
    assert found[spot.id].offer.price_per_hour == pytest.approx(cheap_offer(runpod, spot=True).price_per_hour)
    down = run_cli("down", "--all", "--json", timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert [p["name"] for p in runpod_api.live()] == ["my-own-notebook"]
    assert run_cli("down", "--all", "--json", timeout=120).returncode == 0  # idempotent


def test_stop_keeps_the_volume_billing_and_the_same_attempt_resumes_it(runpod, runpod_api):
    offer = cheap_offer(runpod)
    inst = runpod.provision(offer, _spec(disk_gb=80))
    runpod.teardown(inst, TeardownMode.STOP)
    runpod.teardown(inst, TeardownMode.STOP)  # already stopped: silent
    assert runpod.status(inst) is InstanceState.STOPPED and inst.data["disk_gb"] == 80
    assert len(runpod_api.calls("podStop")) == 1 and len(runpod_api.live()) == 1  # still there: its volume bills
    again = runpod.provision(offer, _spec(disk_gb=80))
    assert again.id == inst.id and runpod_api.calls("podResume") == [{"podId": inst.id, "gpuCount": 1}]
    assert runpod.status(again) is InstanceState.RUNNING
    runpod.teardown(again)


def test_interruptible_pods_bid_and_a_reclaimed_one_is_preempted(runpod, runpod_api):
    offer = cheap_offer(runpod, spot=True, gpu="NVIDIA A100 80GB PCIe")
    inst = runpod.provision(offer, _spec())
    [args] = runpod_api.calls("podRentInterruptable")
    assert args["bidPerGpu"] == 0.82 and runpod_api.calls("podFindAndDeployOnDemand") == []
    assert runpod.job_spec_extras(inst)["preemption"] == []  # RunPod gives no notice
    assert runpod.status(inst) is InstanceState.RUNNING
    runpod_api.preempt(inst.id)
    assert runpod.status(inst) is InstanceState.PREEMPTED
    with pytest.raises(ProviderError, match="reclaimed"):
        runpod.ssh_target(inst)
    runpod.teardown(inst)
    runpod.teardown(inst)  # gone: silent
    assert runpod.status(inst) is InstanceState.TERMINATED and runpod_api.live() == []


def test_teardown_of_a_pod_that_never_existed_is_silent(runpod):
    from launchpad.models import Instance

    ghost = Instance(provider="runpod", id="abcdef0123456", job_id="job-x", state=InstanceState.RUNNING)
    runpod.teardown(ghost)
    runpod.teardown(ghost, TeardownMode.STOP)
    assert runpod.status(ghost) is InstanceState.TERMINATED


@pytest.mark.parametrize("need, host_max, image", [
    (None, None, "runpod/pytorch:2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04"),
    ("12.1", "12.4", "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"),
    ("11.8", "12.2", "runpod/pytorch:2.2.0-py3.10-cuda12.1.1-devel-ubuntu22.04"),
    ("11.8", "11.8", "runpod/pytorch:2.1.0-py3.10-cuda11.8.0-devel-ubuntu22.04"),
])
def test_image_by_cuda_need_and_host_driver(need, host_max, image):
    from launchpad_runpod.pods import choose_image

    ref, allowed = choose_image(need, host_max)
    assert ref == image and allowed[0] == ".".join(image.split("cuda")[1].split(".")[:2])


def test_a_need_no_image_meets_is_no_capacity_before_any_call(runpod_config, runpod_api):
    from launchpad_runpod import RunPodProvider

    provider = RunPodProvider({**runpod_config, "cuda": "13.1"})
    with pytest.raises(NoCapacity, match="no image for CUDA 13.1") as e:
        provider.provision(cheap_offer(provider), _spec())
    assert e.value.scope == "offer" and runpod_api.calls("podFindAndDeployOnDemand") == []


def test_hosts_are_filtered_by_the_images_cuda(runpod_config, runpod_api):
    """CUDA 12.8 wanted: an RTX A6000 whose hosts run CUDA 12.4 drivers has none to offer; an older need fits."""
    from launchpad_runpod import RunPodProvider

    strict = RunPodProvider({**runpod_config, "cuda": "12.8"})
    a6000 = cheap_offer(strict, gpu="NVIDIA RTX A6000")
    with pytest.raises(NoCapacity):
        strict.provision(a6000, _spec())
    relaxed = RunPodProvider({**runpod_config, "host_cuda_max": "12.4"})
    inst = relaxed.provision(a6000, _spec())
    assert runpod_api.calls("podFindAndDeployOnDemand")[-1]["imageName"].endswith("cuda12.4.1-devel-ubuntu22.04")
    relaxed.teardown(inst)


def test_an_image_setting_replaces_the_choice(runpod_config, runpod_api):
    from launchpad_runpod import RunPodProvider

    provider = RunPodProvider({**runpod_config, "image": "me/my-image:1"})
    provider.teardown(provider.provision(cheap_offer(provider), _spec()))
    [args] = runpod_api.calls("podFindAndDeployOnDemand")
    assert args["imageName"] == "me/my-image:1" and "allowedCudaVersions" not in args


def test_the_pods_first_host_key_is_recorded_for_that_pod_only(runpod_config, launchpad_home):
    """No `host_key:` (real pods publish none): the first key is kept in the pod's own known_hosts file."""
    from launchpad_runpod import RunPodProvider

    cfg = {k: v for k, v in runpod_config.items() if k != "host_key"}
    provider = RunPodProvider(cfg)
    inst = provider.provision(cheap_offer(provider), _spec())
    try:
        assert provider.connection(inst).run(["true"]).rc == 0
        known = launchpad_home / "runpod" / "known_hosts" / inst.id
        assert runpod_config["host_key"].split()[1] in known.read_text()
        provider.drop_connection(inst)
        assert provider.connection(inst).run(["true"]).rc == 0  # the recorded key matches
    finally:
        provider.teardown(inst)
        provider.close()
    assert not (launchpad_home / "runpod" / "known_hosts" / inst.id).exists()


def test_a_pod_still_pulling_its_image_is_pending_then_reachable(runpod, runpod_api):
    runpod_api.boot_polls = 3
    inst = runpod.provision(cheap_offer(runpod), _spec())
    assert inst.state is InstanceState.PENDING and inst.address is None
    assert runpod.connection(inst).run(["true"]).rc == 0  # waits for runtime.ports
    runpod.teardown(inst)


def test_the_idle_watchdog_stops_its_own_pod_through_runpodctl(runpod_config):
    from launchpad_runpod import RunPodProvider

    from launchpad.models import Instance

    cfg = {k: v for k, v in runpod_config.items() if k != "shutdown_command"}
    inst = Instance(provider="runpod", id="abcdef0123456", job_id="j", state=InstanceState.RUNNING,
                    data={"shutdown": "terminate"})
    extras = RunPodProvider(cfg).job_spec_extras(inst)
    assert extras["autostop"] == {"action": "terminate", "command": [
        "sh", "-c", '. /etc/rp_environment 2>/dev/null; exec runpodctl "$1" pod "$2"', "sh", "remove", "abcdef0123456"]}


def test_checkpoints_need_a_store_named_somewhere(runpod_config):
    from launchpad_runpod import RunPodProvider

    from launchpad.models import Instance

    provider = RunPodProvider({k: v for k, v in runpod_config.items() if k != "checkpoint_uri"})
    assert provider.default_checkpoint_uri() is None
    with pytest.raises(ConfigError, match="checkpoint.uri") as e:
        provider.checkpoint_uri_for(Instance(provider="runpod", id="abcdef0123456", job_id="j",
                                             state=InstanceState.RUNNING))
    assert "providers.runpod.checkpoint_uri" in str(e.value)


def test_dry_run_shows_the_deploy_input(runpod, runpod_api):
    offer = cheap_offer(runpod, spot=True)
    runpod_api.requests.clear()
    text = runpod.render(offer, _spec())
    assert text.startswith("# podRentInterruptable input") and '"bidPerGpu": 0.35' in text
    assert runpod_api.requests == [] and runpod_api.live() == []  # nothing is rented


def test_a_stopped_pod_costs_its_volume_in_the_plan():
    """providers.yaml runpod: stop is possible and bills the volume at RunPod's stopped rate."""
    from launchpad_runpod import RunPodProvider

    from launchpad.models import Capability
    from launchpad.planner.catalog import facts_for
    from launchpad.planner.disk import stopped_usd_per_day

    facts = facts_for("runpod", "NVIDIA A100 80GB PCIe")
    assert facts.known and facts.stop and facts.spot and not facts.multi_node and RunPodProvider().supports(Capability.STOP)
    assert stopped_usd_per_day(50, facts) == pytest.approx(50 * 0.20 / 30)


def test_up_without_a_store_names_the_fix_and_leaves_no_pod(run_cli, runpod_config, runpod_api, launchpad_home):
    import yaml

    cfg = {k: v for k, v in runpod_config.items() if k != "checkpoint_uri"}
    (launchpad_home / "config.yaml").write_text(yaml.safe_dump({"providers": {"runpod": cfg}}))
    proc = run_cli("up", "recipes/smoke-lora.yaml", "--provider", "runpod", timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "checkpoint.uri" in proc.stderr and "providers.runpod.checkpoint_uri" in proc.stderr
    assert runpod_api.live() == []
