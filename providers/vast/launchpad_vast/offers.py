"""Vast.ai's offers as launchpad `Offer`s, and the container image a job runs in on each host.

One search (``POST /bundles/``, the reference's query language: ``{"field": {"op": value}, ...}``) returns every
rentable machine with its own figures, which the planner scores on (launchpad/planner/estimate.py): its
``reliability`` (reliability2 in newer answers), ``disk_bw`` (MB/s), ``inet_down`` (Mb/s), ``cuda_max_good``
(the newest CUDA its driver runs) and ``min_bid`` (the current lowest winning bid of an interruptible rental).

An offer is one machine's GPUs: instance type ``<n>x-<GPU name>``, region its ``geolocation``, zone
``machine-<machine_id>``. The ask id is not kept: it changes with the host's listing, so `provision` looks
the machine up again and rents whatever ask it has now (or finds it gone: NoCapacity for that offer).

Prices: ``dph_base`` is the machine's price while it runs; storage bills on top, per GB-month at the host's
``storage_cost``, while the instance exists, running or stopped. The offer's price is ``dph_total``, which adds
the storage of the disk searched with (config `disk_gb`, default 50 GB), so the running estimate is right;
what a stopped instance keeps billing is that storage alone (configs/providers.yaml names no Vast-wide disk
price: each host sets its own). The spot price is the bid launchpad would place: ``min_bid`` plus
``bid_margin`` (config, default 10%), which keeps a rental from being outbid by the next small bid, plus the
same storage.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from launchpad.errors import NoCapacity
from launchpad.gpuspec import canonical_gpu_name
from launchpad.images import Image, pick_image
from launchpad.models import Offer

from .api import NAME

# The official PyTorch images (Docker Hub pytorch/pytorch, "<torch>-cuda<X.Y>-cudnn9-runtime" tags, published by
# pytorch/pytorch's docker release workflow): CUDA + cuDNN + Python (conda, /opt/conda/bin/python) + torch, so the
# job's venv reuses the image's torch. One per CUDA minor that torch builds for; config `images:` replaces the list.
IMAGES: tuple[Image, ...] = (
    Image("pytorch/pytorch:2.8.0-cuda12.9-cudnn9-runtime", "12.9"),
    Image("pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime", "12.8"),
    Image("pytorch/pytorch:2.6.0-cuda12.6-cudnn9-runtime", "12.6"),
    Image("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "12.4"),
    Image("pytorch/pytorch:2.5.1-cuda12.1-cudnn9-runtime", "12.1"),
    Image("pytorch/pytorch:2.5.1-cuda11.8-cudnn9-runtime", "11.8"),
)
IMAGE_PYTHON = "/opt/conda/bin/python"  # their interpreter, by path: ssh sessions do not get the image's PATH
DEFAULT_DISK_GB = 50
DEFAULT_MIN_RELIABILITY = 0.9
DEFAULT_BID_MARGIN = 0.10


def images(config: Mapping[str, Any]) -> list[Image]:
    """The images to choose from: config ``images: [{ref, cuda}, ...]`` (then `python:` names the interpreter
    in them) or the official PyTorch list."""
    listed = config.get("images")
    if listed:
        return [Image(str(i["ref"]), str(i["cuda"]), str(i.get("python", "3.11"))) for i in listed]
    return list(IMAGES)


def search_query(config: Mapping[str, Any], **match: Any) -> dict[str, Any]:
    """The search body: rentable, unrented, verified machines (config `verified: false` lists unverified ones
    too) of at least `min_reliability`, cheapest first; `match` narrows it (``machine_id=...``: equality)."""
    q: dict[str, Any] = {"rentable": {"eq": True}, "rented": {"eq": False}, "external": {"eq": False},
                         "num_gpus": {"gte": 1},
                         "reliability": {"gte": float(config.get("min_reliability", DEFAULT_MIN_RELIABILITY))}}
    if config.get("verified", True):
        q["verified"] = {"eq": True}
    if config.get("gpu_names"):
        q["gpu_name"] = {"in": [str(g) for g in config["gpu_names"]]}
    for field, value in match.items():
        q[field] = {"eq": value}
    q.update(order=[["dph_total", "asc"]], type="on-demand", limit=int(config.get("max_offers", 1000)),
             allocated_storage=float(config.get("disk_gb") or DEFAULT_DISK_GB))
    return q


def _num(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def newest_image_cuda(config: Mapping[str, Any], host_max: Any) -> str | None:
    """The CUDA of the newest image the host's driver runs: what a job there gets, so the planner's CUDA
    check (`resources.cuda`) holds for it. None when no image runs there (`provision` then skips the host)."""
    try:
        return pick_image(images(config), need=None, host_max=host_max, provider=NAME).cuda
    except NoCapacity:
        return None


def to_offer(row: Mapping[str, Any], config: Mapping[str, Any]) -> Offer | None:
    """The `Offer` of one search row (None for a row without GPUs or a machine id)."""
    count, machine = int(row.get("num_gpus") or 0), row.get("machine_id")
    name = str(row.get("gpu_name") or "").strip()
    if count < 1 or not name or machine is None:
        return None
    total = _num(row.get("dph_total")) or 0.0
    storage = total - (_num(row.get("dph_base")) or total)  # the disk's share of the hourly price
    bid = _num(row.get("min_bid"))
    margin = float(config.get("bid_margin", DEFAULT_BID_MARGIN))
    host_max = _num(row.get("cuda_max_good"))
    reliability = _num(row.get("reliability2") if row.get("reliability2") is not None else row.get("reliability"))
    return Offer(
        provider=NAME, instance_type=f"{count}x-{name.replace(' ', '_')}",
        region=str(row.get("geolocation") or "unknown"), zone=f"machine-{machine}",
        gpu=canonical_gpu_name(name), gpu_count=count,
        gpu_memory_gb=round((_num(row.get("gpu_ram")) or 0.0) / 1024, 1),  # MB in the API
        vcpus=_num(row.get("cpu_cores_effective")) or 0.0, memory_gb=round((_num(row.get("cpu_ram")) or 0.0) / 1024, 1),
        price_per_hour=round(total, 4), spot_price_per_hour=round(bid * (1 + margin) + storage, 4) if bid else None,
        cuda=newest_image_cuda(config, host_max) if host_max is not None else None,
        reliability=reliability, disk_mb_s=_num(row.get("disk_bw")), inet_down_mbps=_num(row.get("inet_down")),
        host_cuda_max=f"{host_max:g}" if host_max is not None else None,
    )


def machine_of(offer: Offer) -> int | None:
    """The machine id in a live offer's zone (``machine-123``); None for a catalog offer."""
    zone = offer.zone or ""
    return int(zone.removeprefix("machine-")) if zone.startswith("machine-") and zone[8:].isdigit() else None


def catalog_match(offer: Offer) -> dict[str, Any]:
    """Search terms for a catalog offer (``1x-RTX_4090-32-65536``): its GPU model and count."""
    parts = offer.instance_type.split("-")
    name = parts[1].replace("_", " ") if len(parts) > 1 else (offer.gpu or "")
    return {"gpu_name": name, "num_gpus": offer.gpu_count}


def best_row(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The most reliable, then cheapest, of several rows."""
    def key(r: Mapping[str, Any]) -> tuple[float, float]:
        rel = _num(r.get("reliability2") if r.get("reliability2") is not None else r.get("reliability")) or 0.0
        return -rel, _num(r.get("dph_total")) or 0.0

    return min(rows, key=key) if rows else None
