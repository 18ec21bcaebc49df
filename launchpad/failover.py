"""Small pieces of planning that the lifecycle uses while it provisions: which offers a failure rules
out, and how a plan is summarised for the state DB and for the user."""

from __future__ import annotations

from collections.abc import Callable

from .models import Offer


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def blocker(failed: Offer, scope: str) -> Callable[[Offer], bool]:
    if scope == "provider":
        return lambda o: o.provider == failed.provider
    if scope == "region":
        return lambda o: o.provider == failed.provider and o.region == failed.region
    if scope == "zone":
        return lambda o: o.provider == failed.provider and o.region == failed.region and o.zone == failed.zone
    return lambda o: o == failed


def plan_json(planned) -> str:
    import json

    return json.dumps([{"offer": r.offer.to_dict(), "est_cost": r.est_cost, "est_hours": r.est_hours}
                       for r in planned.ranked[:20]])


def top_reasons(rejected, n: int = 3) -> list[str]:
    from collections import Counter

    counts = Counter(r.reason for r in rejected)
    return ([f"{reason} ({count} offers)" if count > 1 else reason for reason, count in counts.most_common(n)]
            or ["no offers at all"])
