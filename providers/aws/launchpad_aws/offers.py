"""The AWS offers: the catalog snapshot's rows in the enabled regions, with what the live API adds when it
answers: local NVMe (instance store) size and EFA support from `DescribeInstanceTypes`, and current spot
prices per zone from `DescribeSpotPriceHistory`. When the API does not answer, the snapshot stands."""

from __future__ import annotations

import datetime as dt
import fnmatch
import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from launchpad.models import Offer

log = logging.getLogger("launchpad.aws")


def region_allowed(region: str, patterns: Iterable[str]) -> bool:
    pats = list(patterns)
    return not pats or any(fnmatch.fnmatchcase(region, p) for p in pats)


def type_info(ec2, types: list[str]) -> dict[str, dict[str, Any]]:
    """instance type -> {"nvme_gb", "efa", "efa_max"} for the types this region knows (no retries:
    best effort; the caller keeps the snapshot's facts when this fails)."""
    out: dict[str, dict[str, Any]] = {}
    for i in range(0, len(types), 100):
        pages = ec2.get_paginator("describe_instance_types").paginate(
            Filters=[{"Name": "instance-type", "Values": types[i:i + 100]}])
        for page in pages:
            for t in page["InstanceTypes"]:
                net = t.get("NetworkInfo") or {}
                out[t["InstanceType"]] = {
                    "nvme_gb": float((t.get("InstanceStorageInfo") or {}).get("TotalSizeInGB") or 0),
                    "efa": bool(net.get("EfaSupported")),
                    "efa_max": int((net.get("EfaInfo") or {}).get("MaximumEfaInterfaces") or 1),
                }
    return out


def spot_prices(ec2, types: list[str], zone_names: dict[str, str]) -> dict[tuple[str, str], float]:
    """(instance type, zone NAME) -> the newest Linux spot price."""
    newest: dict[tuple[str, str], tuple[dt.datetime, float]] = {}
    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=6)
    for i in range(0, len(types), 100):
        pages = ec2.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=types[i:i + 100], ProductDescriptions=["Linux/UNIX", "Linux/UNIX (Amazon VPC)"], StartTime=start)
        for page in pages:
            for row in page["SpotPriceHistory"]:
                key = (row["InstanceType"], row["AvailabilityZone"])
                ts = row.get("Timestamp") or start
                if key not in newest or ts > newest[key][0]:
                    newest[key] = (ts, float(row["SpotPrice"]))
    return {k: v[1] for k, v in newest.items()}


def live_offers(provider, offers: list[Offer], regions: list[str]) -> list[Offer]:
    """`offers` with live NVMe/EFA facts and spot prices where the API answered (per region, concurrently)."""
    by_region: dict[str, list[Offer]] = {}
    for o in offers:
        by_region.setdefault(o.region, []).append(o)

    def one(region: str) -> list[Offer]:
        rows = by_region.get(region, [])
        types = sorted({o.instance_type for o in rows})
        try:
            ec2 = provider.client("ec2", region)
            info = type_info(ec2, types)
            zones = provider.account.zones(region)
            prices = spot_prices(ec2, types, zones)
        except Exception as e:  # the snapshot stands
            log.info("aws: live offer data for %s unavailable (%s); using the catalog snapshot", region, e)
            return rows
        out = []
        for o in rows:
            changes: dict[str, Any] = {}
            facts = info.get(o.instance_type)
            if facts:
                if facts["nvme_gb"]:
                    changes["nvme_gb"] = facts["nvme_gb"]
                if facts["efa"] and o.interconnect and "efa" not in o.interconnect:
                    changes["interconnect"] = o.interconnect.split("+")[0] + "+efa"
            zone_name = zones.get(o.zone or "", o.zone)
            price = prices.get((o.instance_type, zone_name or ""))
            if price is not None:
                changes["spot_price_per_hour"] = price
            out.append(replace(o, **changes) if changes else o)
        return out

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(regions)))) as pool:
        return [o for chunk in pool.map(one, [r for r in regions if r in by_region]) for o in chunk]
