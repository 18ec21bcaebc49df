"""Per-offer quality scores (the seven dimensions, 0..1 each) and the end-to-end time/cost estimate.

    est. time = boot + pre-warm (model + dataset at the provider's 10 GB load rate, or the host's own disk and
                download speed where the offer has them) + training
    training  = k x params x tokens / (GPUs x peak TFLOPs x MFU x scaling efficiency)
                k = 6 full, 4 adapters (+2 when activations are recomputed); MFU lower without FlashAttention-2
    est. cost = est. time x $/h x nodes + egress of the final checkpoint
                + the root volumes (Need.disk_gb per node) at the provider's $/GB-month for est. time
    stopped   = what those volumes bill per day while an idle machine is stopped (autostop.action: stop)

Everything here is a pure function of (offer shape, need): the planner caches it per instance shape (which
includes a marketplace host's own figures: reliability, disk and download speed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..models import Offer
from .catalog import Facts
from .disk import stopped_usd_per_day, volume_usd
from .settings import gpu_info, planner_settings
from .types import Need

DIMENSIONS = ("hardware_availability", "software_stack", "storage_io", "distributed", "cost_transparency",
              "ops_friendliness", "compliance_region")


def version_tuple(v: str | None) -> tuple[int, ...]:
    out = []
    for part in str(v or "").split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


@dataclass(frozen=True)
class Profile:
    """What an offer shape earns: scores and the time estimate (cost is per offer: it needs the price)."""

    scores: Mapping[str, float]
    score: float
    hours: float
    boot_s: float
    prewarm_s: float
    train_s: float
    egress_usd: float
    flash_attention: bool
    tflops: float
    breakdown: Mapping[str, float] = None  # type: ignore[assignment]
    disk_usd: float = 0.0


def flash_attention_ok(offer: Offer) -> bool:
    """FlashAttention-2 needs an Ampere or newer GPU and (for the prebuilt wheels) CUDA 12+ preinstalled;
    unknown CUDA (the image is the user's choice) counts as fine."""
    cc = float(gpu_info(offer.gpu).get("cc", 0) or 0)
    if cc < 8.0:
        return False
    return offer.cuda is None or version_tuple(offer.cuda) >= (12,)


def offer_tflops(offer: Offer) -> float:
    """Peak dense bf16 (fp16 pre-Ampere) TFLOPs of one GPU of the offer; for a CPU offer, the whole CPU."""
    s = planner_settings()["estimate"]
    if not offer.gpu:
        return max(1.0, offer.vcpus or 1.0) * float(s["cpu_tflops_per_vcpu"])
    info = gpu_info(offer.gpu)
    if "pcie" in offer.instance_type.lower() and info.get("tflops_pcie"):
        return float(info["tflops_pcie"])
    return float(info.get("tflops", 50.0))


def offer_load_10gb_s(offer: Offer) -> float | None:
    """Seconds to bring 10 GB onto the host by its own figures (the slower of its download speed and its disk
    bandwidth), where the offer reports them (Vast.ai hosts); None = use the provider's `load_10gb_s`."""
    rates = [r for r in (offer.disk_mb_s, offer.inet_down_mbps / 8 if offer.inet_down_mbps else None) if r]
    return 10_000.0 / min(rates) if rates else None


def scaling_efficiency(offer: Offer, need: Need) -> float:
    sc = planner_settings()["estimate"]["scaling"]
    ic = offer.interconnect or "pcie+ethernet"
    eff = 1.0
    if offer.gpu_count > 1:
        eff *= float(sc["nvlink"] if "nvlink" in ic else sc["pcie"])
    if need.nodes > 1:
        fabric = ic.split("+")[-1]
        eff *= float(sc.get("infiniband" if fabric == "efa" else fabric, sc["ethernet"]))
    return eff


def profile(offer: Offer, need: Need, facts: Facts, weights: Mapping[str, float],
            extra: list[tuple[str, float, float]] | None = None) -> Profile:
    """Scores and time estimate for one offer shape (region and price do not matter here)."""
    est: Mapping[str, Any] = planner_settings()["estimate"]
    world = max(1, offer.gpu_count) * need.nodes
    fa2 = flash_attention_ok(offer) if offer.gpu else False

    # -- time ------------------------------------------------------------------------------------------
    tflops = offer_tflops(offer)
    if offer.gpu:
        mfu = float(est["mfu"][need.adapter]) * (1.0 if fa2 else float(est["mfu_without_flash_attention"]))
    else:
        mfu = float(est["cpu_mfu"])
    k = float(est["flops_per_param_token"][need.adapter])
    if need.gradient_checkpointing:
        k += float(est["recompute_flops_per_param_token"])
    flops = k * need.params * need.tokens(world)
    devices = world if offer.gpu else need.nodes
    train_s = flops / (devices * tflops * 1e12 * mfu * scaling_efficiency(offer, need))
    boot_s = facts.boot_s if facts.known else float(est["default_boot_s"])
    load = offer_load_10gb_s(offer) or (facts.load_10gb_s if facts.known else float(est["default_load_10gb_s"]))
    prewarm_s = (need.download_bytes + need.dataset_bytes) / 1e10 * load
    hours = (boot_s + prewarm_s + train_s) / 3600.0
    egress = need.checkpoint_bytes / 1e9 * (facts.egress_per_gb if facts.known else float(est["default_egress_per_gb"]))
    disk_usd = volume_usd(need.disk_gb, facts, hours, need.nodes)

    # -- the seven dimensions ----------------------------------------------------------------------------
    spot = offer.spot
    cc = float(gpu_info(offer.gpu).get("cc", 0) or 0) if offer.gpu else 0.0
    if offer.gpu:
        software = 0.4 * (cc >= 8.0) + 0.4 * fa2 + 0.2 * (offer.cuda is not None)
    else:
        software = 0.5
    if offer.nvme_gb > 0:
        nvme_part = 1.0
    else:
        nvme_part = 0.3 + 0.7 * facts.nvme_share
    storage = 0.6 * nvme_part + 0.4 * min(1.0, 12.0 / max(load, 1e-6))
    ic = offer.interconnect or "pcie+ethernet"
    distributed = 1.0
    if offer.gpu_count > 1:
        distributed *= 1.0 if "nvlink" in ic else 0.6
    if need.nodes > 1:
        fabric = ic.split("+")[-1]
        distributed *= {"infiniband": 1.0, "efa": 1.0, "roce": 0.9, "ethernet": 0.4}.get(fabric, 0.2)
    boot_score = 1.0 - min(boot_s, 600.0) / 600.0
    scores = {
        # a marketplace host's own reliability score, where the offer has one, instead of the provider's
        "hardware_availability": (facts.availability if offer.reliability is None else offer.reliability)
        * (0.7 if spot else 1.0),
        "software_stack": software,
        "storage_io": storage,
        "distributed": distributed,
        "cost_transparency": facts.cost_transparency * (0.85 if spot else 1.0),
        "ops_friendliness": 0.4 * facts.ops + 0.3 * float(facts.stop) + 0.3 * boot_score,
        "compliance_region": facts.compliance,
    }
    total_w = sum(weights.get(d, 0.0) for d in DIMENSIONS)
    total = sum(weights.get(d, 0.0) * scores[d] for d in DIMENSIONS)
    for name, value, weight in extra or ():
        scores[name] = float(value)
        total += float(weight) * float(value)
        total_w += float(weight)
    score = total / total_w if total_w else 0.0
    breakdown = {"boot_s": boot_s, "prewarm_s": prewarm_s, "train_s": train_s, "egress_usd": egress,
                 "tflops_per_gpu": tflops, "mfu": mfu, "flash_attention": float(fa2), "world_size": float(world),
                 "tokens": need.tokens(world), "disk_usd": disk_usd}
    stopped = stopped_usd_per_day(need.disk_gb, facts, need.nodes) if need.autostop_action == "stop" else None
    if stopped is not None:
        breakdown["stopped_usd_per_day"] = stopped
        if offer.nvme_gb > 0:  # the pre-warmed weights and datasets on it are gone after a stop
            breakdown["nvme_lost_on_stop"] = 1.0
    return Profile(scores=scores, score=score, hours=hours, boot_s=boot_s, prewarm_s=prewarm_s, train_s=train_s,
                   egress_usd=egress, flash_attention=fa2, tflops=tflops, breakdown=breakdown, disk_usd=disk_usd)
