"""The instance's root volume: how big (`disk_need` -> `Need.disk_gb`) and what it costs (`volume_usd`,
`stopped_usd_per_day` in the plan; `disk_usd_so_far` in `launchpad status`).

    disk_gb = ceil(max(min_gb, (weights + datasets + (keep + 1) x checkpoint + env + OS) x (1 + headroom)))

One checkpoint on local disk is what the trainer resumes from: the weights (full fine-tune) or the adapter,
plus the optimizer state (with DeepSpeed also its fp32 master weights; each node keeps its ZeRO shard).
Sizes are GiB, the unit volumes are sold in; the assumptions are in configs/planner.yaml (`disk`).

A block volume bills per GB-month (providers.yaml `disk_per_gb_month`), prorated by the second over a
30-day month (AWS's own worked example), for as long as it exists: while the instance runs, and while it is
stopped. Local NVMe / instance store costs nothing extra and bills nothing when stopped, because its data
is gone then: a restarted instance pre-warms the weights and datasets again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from .memory import GIB, MemoryEstimate
from .settings import planner_settings

HOURS_PER_MONTH = 30 * 24.0
DEFAULTS: Mapping[str, float] = {"env_gb": 10.0, "os_gb": 15.0, "headroom": 0.20, "min_gb": 50.0}


def disk_settings() -> dict[str, float]:
    """planner.yaml's `disk` section over the defaults (a configs dir from before it existed still plans)."""
    out = dict(DEFAULTS)
    out.update({k: float(v) for k, v in (planner_settings().get("disk") or {}).items() if k in DEFAULTS})
    return out


def checkpoint_bytes_on_disk(model_bytes: float, memory: MemoryEstimate | None, nodes: int = 1) -> float:
    """Bytes of one local checkpoint on the node that holds the most of it (node 0 writes the weights)."""
    if memory is None:
        return model_bytes
    optimizer = memory.optimizer_gb * GIB
    if memory.setup.zero_stage >= 1:  # DeepSpeed saves fp32 master weights with the states, sharded
        optimizer = (optimizer + memory.trainable_params * 4.0) / max(1, nodes)
    return model_bytes + optimizer


def disk_need(*, download_bytes: float, dataset_bytes: float, checkpoint_bytes: float,
              memory: MemoryEstimate | None, keep: int, nodes: int = 1) -> tuple[int, str]:
    """(GiB the root volume of each node needs, a one-line why)."""
    s = disk_settings()
    one = checkpoint_bytes_on_disk(checkpoint_bytes, memory, nodes) / GIB
    copies = keep + 1
    what = "weights" if memory is None or memory.setup.adapter == "full" else "adapter"
    if memory is not None:
        what += " + optimizer state"
    parts = [(download_bytes / GIB, "model weights"), (dataset_bytes / GIB, "datasets"),
             (copies * one, f"checkpoints ({copies} x {_gb(one)}: keep {keep} + the one being written; {what})"),
             (s["env_gb"], "Python env (assumed: the image has no training stack)"), (s["os_gb"], "OS image")]
    total = sum(gb for gb, _ in parts)
    with_headroom = total * (1 + s["headroom"])
    gb = math.ceil(max(s["min_gb"], with_headroom) - 1e-9)
    why = " + ".join(f"{_gb(v)} {label}" for v, label in parts if v >= 0.05 or "checkpoints" in label)
    why += f" = {_gb(total)}, +{s['headroom']:.0%} headroom = {_gb(with_headroom)}"
    if with_headroom < s["min_gb"]:
        why += f", at least {s['min_gb']:g} GB"
    return gb, why


def volume_usd(disk_gb: float, facts: Any, hours: float, nodes: int = 1) -> float:
    """What the nodes' root volumes bill over `hours` (0 when the provider's disk is part of the price)."""
    return disk_gb * max(1, nodes) * float(facts.disk_per_gb_month or 0.0) * hours / HOURS_PER_MONTH


def stopped_usd_per_day(disk_gb: float, facts: Any, nodes: int = 1) -> float | None:
    """What the stopped instance(s) keep billing per day: the volumes; None when nothing bills while stopped
    (the provider cannot stop, or its disk is part of the instance price)."""
    price = float(facts.disk_per_gb_month or 0.0)
    if not facts.stop or price <= 0 or disk_gb <= 0:
        return None
    return disk_gb * max(1, nodes) * price / 30.0


def disk_usd_so_far(spans: Iterable[tuple[Any, float, float | None]], now: float | None = None) -> float:
    """What the block volumes of a job's instances have billed so far (`StateDB.instance_spans`): the GB a
    provider records as ``Instance.data["disk_gb"]`` (all its nodes' volumes together) x its
    `disk_per_gb_month`, from creation until the instance is gone (terminated or preempted) and up to now
    while it runs or is stopped. Instances without ``disk_gb`` (local, ssh hosts) add nothing.
    Approximation: the state DB keeps one end time, so an instance stopped before it was terminated counts
    its disk until the stop."""
    from ..models import InstanceState
    from .catalog import facts_for

    now = time.time() if now is None else now
    total = 0.0
    for inst, created, ended in spans:
        gb = float((inst.data or {}).get("disk_gb") or 0.0)
        if gb <= 0 or inst.offer is None:
            continue
        price = facts_for(inst.provider, inst.offer.instance_type).disk_per_gb_month
        gone = inst.state in (InstanceState.TERMINATED, InstanceState.PREEMPTED)
        end = (ended or now) if gone else now
        total += gb * price * max(0.0, end - created) / 3600.0 / HOURS_PER_MONTH
    return total


def _gb(x: float) -> str:
    if 0 < x < 0.05:
        return "<0.1 GB"
    return f"{x:.1f} GB" if x < 100 else f"{math.ceil(x)} GB"
