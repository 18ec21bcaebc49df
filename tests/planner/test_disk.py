"""The root volume: its size from the recipe (Need.disk_gb), its cost in the estimate (breakdown disk_usd) and
what it bills per day while an idle machine is stopped (stopped_usd_per_day), all by hand from
launchpad/planner/disk.py, configs/planner.yaml (`disk`) and configs/providers.yaml (`disk_per_gb_month`)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from planner_helpers import gpu_offer, static_provider

from launchpad.models import Capability
from launchpad.planner import plan, plan_to_json
from launchpad.planner.memory import GIB
from launchpad.planner.need import need_from_recipe
from launchpad.recipe import load_recipe

REPO = Path(__file__).resolve().parents[2]
P_8B = 8_030_261_248  # Llama-3-8B parameters, from the bundled shape
EBS = 0.08  # AWS gp3, USD per GB-month (providers.yaml)


def by_hand(need, *, keep: int, per_checkpoint: float) -> tuple[float, int]:
    """(GB before headroom, disk_gb) from the formula in launchpad/planner/disk.py."""
    total = (need.download_bytes + need.dataset_bytes) / GIB + (keep + 1) * per_checkpoint / GIB + 10 + 15
    return total, max(50, math.ceil(total * 1.2))


def test_smoke_recipe_gets_the_floor_and_says_why() -> None:
    need = need_from_recipe(load_recipe(REPO / "recipes" / "smoke-lora.yaml"))
    m = need.memory
    assert m is not None
    total, gb = by_hand(need, keep=2, per_checkpoint=need.checkpoint_bytes + m.optimizer_gb * GIB)
    assert need.download_bytes == 0 and total < 26  # a builtin model: nothing to download, env + OS only
    assert need.disk_gb == gb == 50
    assert "checkpoints (3 x" in need.disk_why and "keep 2" in need.disk_why
    assert "10.0 GB Python env (assumed: the image has no training stack)" in need.disk_why
    assert "15.0 GB OS image" in need.disk_why and need.disk_why.endswith("at least 50 GB")
    assert "model weights" not in need.disk_why


def test_qlora_8b_recipe_weights_adapters_and_optimizer_state() -> None:
    need = need_from_recipe(load_recipe(REPO / "recipes" / "qlora-8b.yaml"))
    m = need.memory
    assert m is not None
    per_ckpt = m.trainable_params * 2.0 + m.trainable_params * 2.0  # bf16 adapter + paged 8-bit AdamW states
    total, gb = by_hand(need, keep=3, per_checkpoint=per_ckpt)
    assert need.download_bytes == P_8B * 2.0  # the bf16 weights, ~15 GiB
    assert 40 < total < 41.7 and need.disk_gb == gb == 50  # 48.4 GB with headroom: the 50 GB floor
    assert "15.0 GB model weights" in need.disk_why and "keep 3" in need.disk_why
    assert "adapter + optimizer state" in need.disk_why and "+20% headroom = 48.4 GB" in need.disk_why
    assert need.autostop_action == "stop" and need.summary()["disk_gb"] == 50
    assert need.summary()["disk_why"] == need.disk_why


def test_full_fine_tune_checkpoints_dominate() -> None:
    """ZeRO-3 full fine-tune: each local checkpoint holds the bf16 weights, the AdamW states (8 bytes per
    param) and DeepSpeed's fp32 master weights (4): ~105 GB; keep 2 + the one being written."""
    need = need_from_recipe(load_recipe(REPO / "recipes" / "full-deepspeed-8b.yaml"))
    per_ckpt = P_8B * (2 + 8 + 4.0)
    total, gb = by_hand(need, keep=2, per_checkpoint=per_ckpt)
    assert need.disk_gb == gb and 400 < gb < 450
    assert "checkpoints (3 x 105 GB" in need.disk_why and "weights + optimizer state" in need.disk_why
    assert "at least" not in need.disk_why


def aws(*offers, unsupported=None):
    return {"aws": static_provider("aws", list(offers), unsupported)}


def test_ebs_cost_is_in_est_cost_for_aws_offers(write_recipe) -> None:
    r = write_recipe(max_steps=1000)
    p5 = gpu_offer("aws", "p5.4xlarge", gpu="H100", mem=80, price=6.88)  # no NVMe by default (providers.yaml)
    other = gpu_offer("p", "h100", gpu="H100", mem=80, price=6.88)  # a provider providers.yaml does not know
    p = plan(r, {**aws(p5), "p": static_provider("p", [other])}, {}, include_catalog=False)
    got = {x.offer.provider: x for x in p.ranked}
    a, o = got["aws"], got["p"]
    disk = p.need.disk_gb * EBS * a.est_hours / 720  # GB x $/GB-month x hours / (30 x 24)
    assert p.need.disk_gb == 50 and a.breakdown["disk_usd"] == pytest.approx(disk, rel=1e-9) and disk > 0
    assert a.est_cost == pytest.approx(a.est_hours * 6.88 + a.breakdown["egress_usd"] + disk, rel=1e-9)
    assert o.breakdown["disk_usd"] == 0.0  # no price known: nothing added, as before
    assert o.est_cost == pytest.approx(o.est_hours * 6.88 + o.breakdown["egress_usd"], rel=1e-9)
    offers = {d["provider"]: d for d in plan_to_json(p)["offers"]}
    assert offers["aws"]["disk_usd"] == pytest.approx(disk, abs=1e-4)


def test_stopped_cost_only_when_autostop_stops(write_recipe) -> None:
    p5 = gpu_offer("aws", "p5.4xlarge", gpu="H100", mem=80, price=6.88)
    default = plan(write_recipe(), aws(p5), {}, include_catalog=False).ranked[0]  # action: stop is the default
    assert default.breakdown["stopped_usd_per_day"] == pytest.approx(50 * EBS / 30)  # $0.13/day
    assert "nvme_lost_on_stop" not in default.breakdown
    stop_plan = plan(write_recipe(autostop={"action": "stop"}), aws(p5), {}, include_catalog=False)
    d = plan_to_json(stop_plan)["offers"][0]
    assert d["stopped_usd_per_day"] == pytest.approx(0.1333, abs=1e-4) and "stopped_note" not in d
    term = plan(write_recipe(autostop={"action": "terminate"}), aws(p5), {}, include_catalog=False)
    assert "stopped_usd_per_day" not in term.ranked[0].breakdown
    assert term.ranked[0].breakdown["disk_usd"] > 0  # the volume still bills while it runs
    assert plan_to_json(term)["offers"][0]["stopped_usd_per_day"] is None
    # a provider that cannot stop (its class says so) terminates instead: nothing bills stopped
    cannot = plan(write_recipe(), aws(p5, unsupported={Capability.STOP: "no stop here"}), {}, include_catalog=False)
    assert "stopped_usd_per_day" not in cannot.ranked[0].breakdown


def test_local_nvme_adds_nothing_and_does_not_survive_a_stop(write_recipe) -> None:
    """g6e has instance-store NVMe: the root EBS volume still bills while stopped, the NVMe adds nothing and
    its data (pre-warmed weights, datasets) is gone; Lambda and Vast have only local disk priced in (or no
    price known), so a stop bills nothing there."""
    r = write_recipe(resources={"gpu": "L40S"})
    g6e = gpu_offer("aws", "g6e.xlarge", gpu="L40S", mem=48, price=1.86)
    lam = gpu_offer("lambda", "gpu_1x_l40s", gpu="L40S", mem=48, price=1.0)
    vast = gpu_offer("vast", "1x-L40S", gpu="L40S", mem=48, price=0.5)
    providers = {**aws(g6e), "lambda": static_provider("lambda", [lam]), "vast": static_provider("vast", [vast])}
    p = plan(r, providers, {}, include_catalog=False)
    got = {x.offer.provider: x for x in p.ranked}
    assert got["aws"].offer.nvme_gb == 250
    assert got["aws"].breakdown["stopped_usd_per_day"] == pytest.approx(50 * EBS / 30)
    assert got["aws"].breakdown["nvme_lost_on_stop"] == 1.0
    for name in ("lambda", "vast"):
        assert "stopped_usd_per_day" not in got[name].breakdown and got[name].breakdown["disk_usd"] == 0.0
    offers = {d["provider"]: d for d in plan_to_json(p)["offers"]}
    assert "does not survive a stop" in offers["aws"]["stopped_note"]
    assert offers["lambda"]["stopped_usd_per_day"] is None and "stopped_note" not in offers["lambda"]


def test_every_node_has_its_own_volume(write_recipe) -> None:
    p5 = gpu_offer("aws", "p5.4xlarge", gpu="H100", mem=80, price=6.88)
    one = plan(write_recipe(), aws(p5), {}, include_catalog=False).ranked[0]
    two = plan(write_recipe(resources={"nodes": 2}), aws(p5), {}, include_catalog=False).ranked[0]
    assert two.breakdown["stopped_usd_per_day"] == pytest.approx(2 * one.breakdown["stopped_usd_per_day"])
    assert two.breakdown["disk_usd"] == pytest.approx(2 * 50 * EBS * two.est_hours / 720)


def test_provider_facts_cite_their_storage_price() -> None:
    from launchpad.planner.catalog import facts_for

    for name, price in (("aws", 0.08), ("gcp", 0.10)):
        f = facts_for(name, "")
        assert f.disk_per_gb_month == price and f.source("disk_per_gb_month").startswith("docs:")
    assert facts_for("azure", "").source("disk_per_gb_month")
    assert facts_for("lambda", "").disk_per_gb_month == 0 and facts_for("vast", "").disk_per_gb_month == 0
