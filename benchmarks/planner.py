"""Planner benchmark: catalog load time, plan time over the full catalog (~90k rows, CPU-only rows
included) and over 1M synthetic offers, each against a plain-Python baseline planner measured in the
same run (same constraints and estimate, no per-shape caching: every offer evaluated from scratch).

    python benchmarks/planner.py [--source ../shared/catalog] [--synthetic 1000000] [--repeat 3]

Goal (issue 5): <= 0.5 s per 100k offers once the catalog is loaded.
"""

from __future__ import annotations

import argparse
import fnmatch
import gc
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

QLORA_8B = """name: bench
base_model: meta-llama/Meta-Llama-3-8B
adapter: qlora
datasets: [{path: tatsu-lab/alpaca, type: alpaca}]
sequence_len: 2048
micro_batch_size: 4
gradient_accumulation_steps: 8
num_epochs: 3
gradient_checkpointing: true
lora_r: 64
lora_target_modules: [q_proj, v_proj]
resources: {gpu: "24GB..", spot: auto, regions: ["us-*", "europe-*", "eu*"], max_price: 40}
"""

T = TypeVar("T")


def timed(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    best = float("inf")
    for _ in range(max(1, repeat)):
        gc.collect()
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def baseline_plan(need, offers_by_provider):
    """Plain Python: the same checks and estimate, recomputed for every offer (no caches)."""
    from launchpad.models import Capability  # noqa: F401 - same imports a naive planner would need
    from launchpad.planner.catalog import facts_for
    from launchpad.planner.estimate import profile, version_tuple
    from launchpad.planner.settings import gpu_info, planner_settings

    weights = planner_settings()["weights"]
    ranked, rejected = [], []
    for offers in offers_by_provider.values():
        for o in offers:
            variants = [o]
            if need.spot == "auto" and o.spot_price_per_hour is not None:
                variants.append(replace(o, spot=True))
            for v in variants:
                facts = facts_for.__wrapped__(v.provider, v.instance_type)  # uncached
                reason = None
                if not v.gpu:
                    reason = "no GPU"
                elif gpu_info(v.gpu).get("vendor", "nvidia") != "nvidia":
                    reason = "not NVIDIA"
                elif need.gpu is not None and not need.gpu.matches(v.gpu, v.gpu_memory_gb, v.gpu_count):
                    reason = "gpu spec"
                elif need.vram_for(v.gpu_count * need.nodes) > v.gpu_memory_gb:
                    reason = "vram"
                elif (v.memory_gb and v.memory_gb < need.host_ram_for(v.gpu_count)) or (
                        v.vcpus and v.vcpus < need.host_cpus_for(v.gpu_count)):
                    reason = "host"
                elif need.cuda_min and v.cuda and version_tuple(v.cuda) < version_tuple(need.cuda_min):
                    reason = "cuda"
                elif need.regions and not any(fnmatch.fnmatch(v.region, g) for g in need.regions):
                    reason = "region"
                elif need.max_price is not None and v.price * need.nodes > need.max_price:
                    reason = "price"
                if reason:
                    rejected.append((v, reason))
                    continue
                p = profile(v, need, facts, weights)
                ranked.append((p.hours * v.price + p.egress_usd, -p.score, v))
    ranked.sort(key=lambda t: (t[0], t[1]))
    return ranked, rejected


def synthetic(base: dict, n: int, seed: int = 7) -> dict:
    """n offers made from the real ones: same shapes, shuffled regions and jittered prices."""
    rng = random.Random(seed)
    flat = [o for offers in base.values() for o in offers]
    regions = sorted({o.region for o in flat})
    out: dict[str, list] = {}
    for i in range(n):
        o = flat[i % len(flat)]
        region = rng.choice(regions)
        price = round(o.price_per_hour * rng.uniform(0.7, 1.3), 4)
        spot = None if o.spot_price_per_hour is None else round(price * rng.uniform(0.2, 0.6), 4)
        out.setdefault(o.provider, []).append(replace(o, region=region, zone=None, price_per_hour=price,
                                                      spot_price_per_hour=spot))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default=str(REPO.parent / "shared" / "catalog"))
    ap.add_argument("--synthetic", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from launchpad.planner import catalog as catalog_mod
    from launchpad.planner import plan
    from launchpad.planner.build_catalog import read_source
    from launchpad.planner.catalog import read_catalog_csv
    from launchpad.planner.need import need_from_recipe
    from launchpad.recipe import load_recipe

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        path.write_text(QLORA_8B)
        recipe = load_recipe(path)
    need = need_from_recipe(recipe)

    print("== catalog load")
    def load_snapshot():
        catalog_mod._catalog.cache_clear()
        return catalog_mod.load_catalog()
    t, snap = timed(load_snapshot, args.repeat)
    n_snap = sum(len(v) for v in snap.values())
    print(f"committed snapshot (configs/catalog, GPU offers): {n_snap} offers in {t * 1000:.1f} ms")

    full = None
    src = Path(args.source)
    if src.is_dir():
        t, rows = timed(lambda: read_source(src, gpu_only=False), 1)
        n_rows = sum(len(v) for v in rows.values())
        print(f"full source {src} (all rows, CPU-only too): {n_rows} rows parsed+normalised in {t:.2f} s")
        with tempfile.TemporaryDirectory() as tmp:
            from launchpad.planner.build_catalog import write_catalog

            write_catalog(rows, Path(tmp))
            t, full = timed(lambda: {p.stem: read_catalog_csv(p.stem, p) for p in Path(tmp).glob("*.csv")}, 1)
        print(f"  as a normalised CSV: {sum(len(v) for v in full.values())} offers loaded in {t:.2f} s")
    else:
        print(f"(no {src}: skipping the full-source catalog)")

    cases = [("snapshot", snap)]
    if full is not None:
        cases.append(("full catalog", full))
    if args.synthetic:
        cases.append((f"synthetic {args.synthetic:,}", synthetic(snap, args.synthetic)))

    print("\n== plan time (catalog loaded; 8B QLoRA, gpu 24GB.., spot auto, 3 region globs, price cap)")
    print(f"{'catalog':<22}{'offers':>10}{'planner s':>12}{'baseline s':>12}{'speed-up':>10}{'s/100k':>9}")
    for label, cat in cases:
        n = sum(len(v) for v in cat.values())
        t_plan, p = timed(partial(plan, recipe, {}, {}, catalog=cat, need=need), args.repeat)
        t_base, (b_ranked, b_rej) = timed(partial(baseline_plan, need, cat), 1 if n > 200_000 else args.repeat)
        assert len(p.unconfigured) == len(b_ranked), (len(p.unconfigured), len(b_ranked))
        print(f"{label:<22}{n:>10,}{t_plan:>12.3f}{t_base:>12.3f}{t_base / t_plan:>9.1f}x{t_plan / n * 1e5:>9.3f}")
    print("\nBoth planners find the same feasible offers (asserted). Goal: <= 0.5 s per 100k offers.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
