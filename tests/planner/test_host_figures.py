"""A marketplace host's own figures (Vast.ai reports them per machine: reliability, disk bandwidth, download
speed) replace the provider-wide facts of configs/providers.yaml in the score and the pre-warm estimate;
offers without them are scored exactly as before."""

from __future__ import annotations

from dataclasses import replace

import pytest
from planner_helpers import gpu_offer, static_provider

from launchpad.planner import plan
from launchpad.planner.catalog import facts_for
from launchpad.planner.core import _bucket
from launchpad.planner.settings import planner_settings


def run(recipe, *offers, minimize="cost"):
    return plan(recipe, {"vast": static_provider("vast", list(offers))}, {}, include_catalog=False, minimize=minimize)


def test_a_reliable_host_beats_a_slightly_cheaper_unreliable_one(write_recipe) -> None:
    r = write_recipe(max_steps=200)
    shaky = replace(gpu_offer("vast", "1x-RTX_4090", gpu="RTX4090", mem=24, price=0.402, zone="machine-1"),
                    reliability=0.80)
    solid = replace(gpu_offer("vast", "1x-RTX_4090", gpu="RTX4090", mem=24, price=0.404, zone="machine-2"),
                    reliability=0.995)
    p = run(r, shaky, solid)
    got = {x.offer.zone: x for x in p.ranked}
    assert got["machine-1"].est_cost < got["machine-2"].est_cost  # 0.5% cheaper ...
    pct = float(planner_settings()["tie_pct"])
    assert _bucket(got["machine-1"].est_cost, pct) == _bucket(got["machine-2"].est_cost, pct)  # ... within tie_pct
    # each host is scored on its own reliability, not on vast's provider-wide 0.8
    assert got["machine-1"].scores["hardware_availability"] == pytest.approx(0.80)
    assert got["machine-2"].scores["hardware_availability"] == pytest.approx(0.995)
    assert [x.offer.zone for x in p.ranked] == ["machine-2", "machine-1"]
    # without the hosts' figures both get the provider's, and the cheaper one wins
    p = run(r, replace(shaky, reliability=None), replace(solid, reliability=None))
    assert {x.scores["hardware_availability"] for x in p.ranked} == {facts_for("vast").availability}
    assert [x.offer.zone for x in p.ranked] == ["machine-1", "machine-2"]


def test_spot_still_discounts_a_hosts_reliability(write_recipe) -> None:
    r = write_recipe(resources={"spot": True})
    o = replace(gpu_offer("vast", "1x-RTX_4090", gpu="RTX4090", mem=24, price=0.4, spot=0.2), reliability=0.9)
    (ranked,) = run(r, o).ranked
    assert ranked.scores["hardware_availability"] == pytest.approx(0.9 * 0.7)


def test_pre_warm_runs_at_the_hosts_own_disk_and_download_speed(write_recipe) -> None:
    r = write_recipe(max_steps=200)
    base = gpu_offer("vast", "1x-A6000", gpu="A6000", mem=48, price=0.5)
    slow_net = replace(base, zone="m-slow", inet_down_mbps=100.0, disk_mb_s=2000.0)  # 12.5 MB/s down
    slow_disk = replace(base, zone="m-disk", inet_down_mbps=8000.0, disk_mb_s=200.0)  # 200 MB/s disk
    fast = replace(base, zone="m-fast", inet_down_mbps=8000.0, disk_mb_s=3000.0)  # 1000 MB/s either way
    p = run(r, slow_net, slow_disk, fast, base)
    got = {x.offer.zone: x for x in p.ranked}
    need = p.need
    gb10 = (need.download_bytes + need.dataset_bytes) / 1e10
    assert got["m-slow"].breakdown["prewarm_s"] == pytest.approx(gb10 * 10_000 / 12.5)
    assert got["m-disk"].breakdown["prewarm_s"] == pytest.approx(gb10 * 10_000 / 200)
    assert got["m-fast"].breakdown["prewarm_s"] == pytest.approx(gb10 * 10)
    assert got[None].breakdown["prewarm_s"] == pytest.approx(gb10 * facts_for("vast").load_10gb_s)  # no figures
    assert got["m-fast"].scores["storage_io"] > got[None].scores["storage_io"] > got["m-slow"].scores["storage_io"]
    assert [x.offer.zone for x in p.ranked][0] == "m-fast"
