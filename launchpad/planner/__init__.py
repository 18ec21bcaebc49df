"""The planner: recipe -> `Need` -> filter every offer (each rejection keeps its reason) -> score -> rank.

Public API (the lifecycle and the CLI call these)::

    plan(recipe, providers, unavailable, *, minimize="cost", top=None, include_catalog=True,
         only_providers=None) -> Plan
    plan_to_json(plan) -> dict              # {"need", "offers": [...], "rejected": [...], ...}
    stopped_cost(ranked_offer) -> dict      # disk_usd, stopped_usd_per_day, stopped_note
    rejection_summary(plan, limit=None)     # [(reason, count), ...] most common first
    blocked(offer, scope) -> predicate      # failover: which offers a NoCapacity/AuthError rules out

Failover (issue 5 item 7) is run by the lifecycle: try `plan.ranked` in order; on `NoCapacity(scope=...)`
or `AuthError` (scope "provider") add ``blocked(offer, scope)`` to a list and skip every later offer any
predicate matches. Submodules: catalog (offers + provider facts), memory (VRAM estimate), need,
estimate (scores, time, cost), core (constraints and ranking), build_catalog (the snapshot builder).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from ..models import Offer
from .core import MINIMIZE, plan
from .types import Need, Plan, RankedOffer, Rejection

__all__ = ["plan", "plan_to_json", "blocked", "rejection_summary", "offer_json", "stopped_cost", "Plan", "Need",
           "RankedOffer", "Rejection", "MINIMIZE", "SCOPES"]

SCOPES = ("offer", "zone", "region", "provider")


def blocked(offer: Offer, scope: str) -> Callable[[Offer], bool]:
    """A predicate true for every offer a failure of `offer` at `scope` rules out:
    "offer" = the same instance type in the same zone/region (on-demand and spot alike are separate offers:
    only the same market), "zone", "region", "provider" (auth errors, quota for the whole account)."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES} (got {scope!r})")
    p, region, zone = offer.provider, offer.region, offer.zone
    if scope == "provider":
        return lambda o: o.provider == p
    if scope == "region":
        return lambda o: o.provider == p and o.region == region
    if scope == "zone":
        if zone is None:
            return lambda o: o.provider == p and o.region == region
        return lambda o: o.provider == p and o.zone == zone
    key = (p, offer.instance_type, region, zone, offer.spot, offer.gpu, offer.gpu_count)
    return lambda o: (o.provider, o.instance_type, o.region, o.zone, o.spot, o.gpu, o.gpu_count) == key


def offer_json(offer: Offer, configured: bool) -> dict[str, Any]:
    return {
        "provider": offer.provider, "instance_type": offer.instance_type, "region": offer.region,
        "zone": offer.zone, "gpu": offer.gpu, "gpu_count": offer.gpu_count,
        "gpu_memory_gb": offer.gpu_memory_gb, "price_per_hour": round(offer.price, 6), "spot": offer.spot,
        "configured": configured,
        # a marketplace host's own figures, where the offer has them (the planner scored on them)
        **{k: v for k in ("reliability", "disk_mb_s", "inet_down_mbps", "host_cuda_max")
           if (v := getattr(offer, k)) is not None},
    }


def stopped_cost(r: RankedOffer) -> dict[str, Any]:
    """The root volume's part of a ranked offer: `disk_usd` (in est_cost), `stopped_usd_per_day` (what an
    idle-stopped machine keeps billing; None when nothing does) and a `stopped_note` for local NVMe."""
    b = r.breakdown
    stopped = b.get("stopped_usd_per_day")
    out: dict[str, Any] = {"disk_usd": round(b.get("disk_usd", 0.0), 4),
                           "stopped_usd_per_day": None if stopped is None else round(stopped, 4)}
    if b.get("nvme_lost_on_stop"):
        out["stopped_note"] = "the data on local NVMe (pre-warmed weights, datasets) does not survive a stop"
    return out


def plan_to_json(plan: Plan) -> dict[str, Any]:
    """The `--json` form: `offers` best first (offer fields + score, est_hours, est_cost, configured, scores,
    `stopped_cost`'s disk_usd, stopped_usd_per_day and stopped_note),
    `unconfigured` (the same for offers of providers not configured that would fit) and `rejected`
    (offer fields + reason + code)."""
    def ranked_json(r: RankedOffer, configured: bool) -> dict[str, Any]:
        d = offer_json(r.offer, configured)
        d.update(score=round(r.score, 4), est_hours=round(r.est_hours, 4), est_cost=round(r.est_cost, 4),
                 scores={k: round(v, 4) for k, v in r.scores.items()})
        d.update(stopped_cost(r))
        return d

    offers = [ranked_json(r, True) for r in plan.ranked]
    rejected = []
    for rej in plan.rejected:
        d = offer_json(rej.offer, rej.configured)
        d.update(reason=rej.reason, code=rej.code)
        rejected.append(d)
    return {"need": plan.need.summary(), "minimize": plan.minimize, "configured": sorted(plan.configured),
            "notes": list(plan.notes), "offers": offers,
            "unconfigured": [ranked_json(r, False) for r in plan.unconfigured], "rejected": rejected}


def rejection_summary(plan: Plan, limit: int | None = None) -> list[tuple[str, int]]:
    """Rejection reasons with their counts, most common first."""
    return Counter(r.reason for r in plan.rejected).most_common(limit)
