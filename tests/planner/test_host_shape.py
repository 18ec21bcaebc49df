"""Issue 9 item 4: the planner picks the cheapest host shape that meets the recipe's CPU and host-RAM need,
on the committed catalog snapshot (GCP sells one L4 on g2-standard-4, 8, 12, 16 and 32)."""

from __future__ import annotations

import pytest
from planner_helpers import gpu_offer, static_provider

from launchpad.planner import plan


def _best_gcp(write_recipe, **fields):
    r = write_recipe(resources={"gpu": "L4:1", "providers": ["gcp"]}, **fields)
    p = plan(r, {}, {}, minimize="cost")
    assert not p.ranked and p.unconfigured  # gcp is not configured here: what it could do
    return p, p.unconfigured[0].offer


def test_small_model_gets_the_smallest_g2_shape(write_recipe) -> None:
    p, best = _best_gcp(write_recipe, base_model="builtin:tiny-llama", adapter="lora")
    assert best.instance_type == "g2-standard-4"
    assert best.price == pytest.approx(0.70452)
    assert p.need.host_ram_for(1) <= 16


def test_8b_weights_do_not_fit_g2_standard_4_so_a_bigger_shape_wins(write_recipe) -> None:
    p, best = _best_gcp(write_recipe)  # Llama-3-8B: ~15 GB of bf16 weights pass through host RAM
    assert p.need.host_ram_for(1) > 16
    assert best.instance_type == "g2-standard-8"
    small = [r for r in p.rejected if r.offer.instance_type == "g2-standard-4"]
    assert small and all(r.code == "host" and "host RAM" in r.reason for r in small)
    assert "bf16 weights" in small[0].reason


def test_vcpus_and_unknown_host_sizes(write_recipe) -> None:
    r = write_recipe(resources={"gpu": "A100:8"})
    thin = gpu_offer(instance_type="thin", count=8, vcpus=8)  # 8 GPUs, 8 vCPUs: one per trainer process
    unknown = gpu_offer(instance_type="unknown", count=8, vcpus=0, ram=0)  # marketplaces may not say
    p = plan(r, {"p": static_provider("p", [thin, unknown])}, {}, include_catalog=False)
    assert [x.offer.instance_type for x in p.ranked] == ["unknown"]
    assert p.rejected[0].code == "host" and "vCPUs: needs 16" in p.rejected[0].reason
