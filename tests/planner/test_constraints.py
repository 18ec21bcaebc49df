"""Every hard constraint keeps a reason; unconfigured providers are shown, but only after the constraints."""

from __future__ import annotations

import pytest
from planner_helpers import gpu_offer, static_provider

from launchpad.models import Capability
from launchpad.planner import plan


def run(recipe, *offers, unsupported=None, name="p", **kw):
    prov = static_provider(name, list(offers), unsupported)
    return plan(recipe, {name: prov}, {}, include_catalog=False, **kw)


def reasons(p) -> dict[str, str]:
    return {r.offer.instance_type + (":spot" if r.offer.spot else ""): r.reason for r in p.rejected}


def codes(p) -> dict[str, str]:
    return {r.offer.instance_type + (":spot" if r.offer.spot else ""): r.code for r in p.rejected}


def ranked(p) -> list[str]:
    return [r.offer.instance_type + (":spot" if r.offer.spot else "") for r in p.ranked]


def test_vram(write_recipe) -> None:
    r = write_recipe(adapter="lora", resources={"gpu": "1"})  # ~21 GB
    p = run(r, gpu_offer(instance_type="t4", gpu="T4", mem=16), gpu_offer(instance_type="a100"))
    assert ranked(p) == ["a100"]
    assert codes(p) == {"t4": "vram"}
    assert "VRAM: needs 2" in reasons(p)["t4"] and "T4 has 16 GB" in reasons(p)["t4"]


def test_gpu_spec_name_memory_and_count(write_recipe) -> None:
    r = write_recipe(resources={"gpu": "A100:80GB:2"})
    p = run(r, gpu_offer(instance_type="h100", gpu="H100", count=2), gpu_offer(instance_type="a40", mem=40, count=2),
            gpu_offer(instance_type="a1", count=1), gpu_offer(instance_type="a2", count=2))
    assert ranked(p) == ["a2"]
    assert codes(p) == {"h100": "gpu", "a40": "gpu", "a1": "gpu_count"}
    assert reasons(p)["a1"] == "1 x A100, the recipe asks for 2"


def test_cpu_offers(write_recipe) -> None:
    tiny = write_recipe(base_model="builtin:tiny-llama", adapter="lora")
    p = run(tiny, gpu_offer(instance_type="cpu", gpu=None, price=0))
    assert ranked(p) == ["cpu"]
    big = write_recipe()  # no resources.gpu, but an 8B model
    p = run(big, gpu_offer(instance_type="cpu", gpu=None), gpu_offer(instance_type="a100"))
    assert ranked(p) == ["a100"] and codes(p) == {"cpu": "cpu"}
    needs_gpu = write_recipe(base_model="builtin:tiny-llama", resources={"gpu": "A100"})
    assert codes(run(needs_gpu, gpu_offer(instance_type="cpu", gpu=None))) == {"cpu": "gpu"}


def test_non_nvidia_accelerators(write_recipe) -> None:
    p = run(write_recipe(), gpu_offer(instance_type="mi", gpu="MI300X", mem=192))
    assert codes(p) == {"mi": "accelerator"}


def test_nodes_need_multi_node_support(write_recipe) -> None:
    r = write_recipe(resources={"gpu": "A100:8", "nodes": 2})
    offer = gpu_offer(instance_type="a8", count=8)
    p = run(r, offer, unsupported={Capability.MULTI_NODE: "p has no cluster networking"})
    assert codes(p) == {"a8": "multi_node"} and reasons(p)["a8"] == "p has no cluster networking"
    assert ranked(run(r, offer)) == ["a8"]
    # providers.yaml facts count too: vast has no cross-instance NCCL
    p = run(r, gpu_offer("vast", "v8", count=8), name="vast")
    assert codes(p) == {"v8": "multi_node"} and "no cross-instance NCCL" in reasons(p)["v8"]


def test_cuda_minimum(write_recipe) -> None:
    r = write_recipe(resources={"cuda": "12.1"})
    p = run(r, gpu_offer(instance_type="old", cuda="11.7"), gpu_offer(instance_type="new", cuda="12.4"),
            gpu_offer(instance_type="unknown", cuda=None))
    assert sorted(ranked(p)) == ["new", "unknown"]
    assert reasons(p) == {"old": "CUDA 11.7 preinstalled, the recipe needs >= 12.1"}


def test_nvme_required(write_recipe) -> None:
    r = write_recipe(resources={"disk": "nvme"})
    p = run(r, gpu_offer(instance_type="disk", nvme=0), gpu_offer(instance_type="fast", nvme=1000))
    assert ranked(p) == ["fast"] and codes(p) == {"disk": "nvme"}
    # a marketplace where only some hosts have NVMe is not a guarantee
    p = run(r, gpu_offer("vast", "v1"), name="vast")
    assert "not guaranteed" in reasons(p)["v1"] and "18%" in reasons(p)["v1"]


def test_region_globs(write_recipe) -> None:
    r = write_recipe(resources={"regions": ["us-*", "europe-west4-a"]})
    p = run(r, gpu_offer(instance_type="us", region="us-west-2"), gpu_offer(instance_type="eu", region="eu-west-1"),
            gpu_offer(instance_type="zone", region="europe-west4", zone="europe-west4-a"))
    assert sorted(ranked(p)) == ["us", "zone"]
    assert codes(p) == {"eu": "region"} and "eu-west-1" in reasons(p)["eu"]


def test_spot_policy(write_recipe) -> None:
    with_spot = gpu_offer(instance_type="s", price=3.0, spot=1.0)
    no_spot = gpu_offer(instance_type="n", price=2.0)
    p = run(write_recipe(resources={"spot": False}), with_spot, no_spot)
    assert sorted(ranked(p)) == ["n", "s"]
    p = run(write_recipe(resources={"spot": True}), with_spot, no_spot)
    assert ranked(p) == ["s:spot"] and codes(p) == {"n": "spot"}
    assert p.ranked[0].offer.price == 1.0
    p = run(write_recipe(resources={"spot": "auto"}), with_spot, no_spot)
    assert sorted(ranked(p)) == ["n", "s", "s:spot"]
    # a provider without a spot market
    p = run(write_recipe(resources={"spot": True}), with_spot, unsupported={Capability.SPOT: "p sells no spot"})
    assert reasons(p) == {"s:spot": "p sells no spot"}


def test_price_cap_is_for_the_whole_job(write_recipe) -> None:
    r = write_recipe(resources={"gpu": "A100:8", "nodes": 2, "max_price": 30})
    p = run(r, gpu_offer(instance_type="a", count=8, price=14.0), gpu_offer(instance_type="b", count=8, price=16.0))
    assert ranked(p) == ["a"]
    assert reasons(p) == {"b": "$32.00/h is over max_price $30/h"}


def test_provider_allow_list(write_recipe) -> None:
    r = write_recipe(resources={"providers": ["other"]})
    p = run(r, gpu_offer(instance_type="x"))
    assert codes(p) == {"x": "provider"} and "allowed providers (other)" in reasons(p)["x"]


def test_stop_capability_only_when_the_recipe_asks_for_stop(write_recipe) -> None:
    offer = gpu_offer(instance_type="x")
    lacks = {Capability.STOP: "p cannot stop VMs"}
    assert ranked(run(write_recipe(), offer, unsupported=lacks)) == ["x"]  # default autostop: fine
    p = run(write_recipe(autostop={"action": "stop"}), offer, unsupported=lacks)
    assert codes(p) == {"x": "stop"} and reasons(p)["x"].startswith("p cannot stop VMs")
    assert ranked(run(write_recipe(autostop={"action": "terminate"}), offer, unsupported=lacks)) == ["x"]


def test_not_configured_comes_after_the_hard_constraints(write_recipe) -> None:
    r = write_recipe(adapter="lora", resources={"gpu": "1"})
    catalog = {"lambda": [gpu_offer("lambda", "big"), gpu_offer("lambda", "small", gpu="T4", mem=16)],
               "aws": [gpu_offer("aws", "p4")]}
    p = plan(r, {}, {"aws": "no AWS credentials"}, catalog=catalog)
    assert p.ranked == ()
    got = {r.offer.instance_type: (r.code, r.reason, r.configured) for r in p.rejected}
    assert got["big"] == ("not_configured", "lambda: not configured (no launchpad-lambda plugin installed)", False)
    assert got["p4"] == ("not_configured", "aws: not configured (no AWS credentials)", False)
    assert got["small"][0] == "vram"  # it could not run the recipe anyway: that is the reason shown
    assert sorted(u.offer.instance_type for u in p.unconfigured) == ["big", "p4"]
    # configured providers' offers come from the provider, not the catalog
    prov = static_provider("aws", [gpu_offer("aws", "live")])
    p = plan(r, {"aws": prov}, {}, catalog=catalog)
    assert [x.offer.instance_type for x in p.ranked] == ["live"]
    assert "p4" not in {x.offer.instance_type for x in p.rejected}


def test_only_providers_leaves_the_rest_out(write_recipe) -> None:
    catalog = {"lambda": [gpu_offer("lambda", "l")], "aws": [gpu_offer("aws", "a")]}
    p = plan(write_recipe(), {}, {}, catalog=catalog, only_providers=["aws"])
    assert {r.offer.provider for r in p.rejected} == {"aws"}


def test_bad_minimize_is_bad_input(write_recipe) -> None:
    from launchpad.errors import BadInput

    with pytest.raises(BadInput):
        run(write_recipe(), gpu_offer(), minimize="vibes")


def test_an_unknown_model_is_a_recipe_error_not_any_gpu(write_recipe, monkeypatch) -> None:
    from launchpad.errors import RecipeError

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no Hub here: the cache and the bundled table only
    with pytest.raises(RecipeError) as err:
        run(write_recipe(base_model="someorg/mystery"), gpu_offer(instance_type="x", gpu="T4", mem=16))
    text = str(err.value)
    assert "base_model: cannot size model 'someorg/mystery'" in text and "base_model_config:" in text
    sized = run(write_recipe(base_model="someorg/mystery", base_model_config={
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 128256}), gpu_offer(instance_type="x", gpu="T4", mem=16))
    assert sized.need.vram_gb is not None and sized.need.params == pytest.approx(8.03e9, rel=0.01)
