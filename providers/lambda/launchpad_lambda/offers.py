"""What Lambda's API documents say, read the same way everywhere: instance types -> Offers, an instance's
state, and the names launchpad gives instances (Lambda has no labels to find them by, so the name says
whose it is).

A name is ``lp-<job>.<token hash>.<rank>.<launch time>``, at most Lambda's 64 characters:
- ``<job>`` the job id (a long one is cut and keeps a hash: ``<first 32>~<hash8>``; then the exact id comes
  from the instance's `launchpad-job` tag where the API returns tags);
- ``<token hash>`` 8 hex digits of the attempt's token: `provision` is idempotent on it;
- ``<launch time>`` Unix seconds in base 36: the reaper's age of an instance (the API has no creation time).
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import time
from collections.abc import Iterable
from typing import Any

from launchpad.models import JOB_TAG, InstanceState, Offer

from .api import NAME

PREFIX = "lp-"
_MAX_NAME = 64
_MAX_JOB = _MAX_NAME - len(PREFIX) - len(".01234567.99.") - 7  # 41: room for a rank < 100 and 7 time digits
_NAME = re.compile(r"^lp-(?P<job>[A-Za-z0-9._~-]+)\.(?P<token>[0-9a-f]{8})\.(?P<rank>\d{1,2})\.(?P<ts>[0-9a-z]{1,8})$")
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*GB", re.I)
_VENDOR_WORDS = {"NVIDIA", "TESLA", "QUADRO", "GEFORCE"}
_GIB = 1.073741824  # GB per GiB


# -- names ---------------------------------------------------------------------------------------------
def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:8]


def job_part(job_id: str) -> str:
    if len(job_id) <= _MAX_JOB:
        return job_id
    return f"{job_id[:_MAX_JOB - 9]}~{hashlib.sha256(job_id.encode()).hexdigest()[:8]}"


def _base36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if not n:
            return out


def instance_name(job_id: str, token: str, rank: int, now: float | None = None) -> str:
    return f"{PREFIX}{job_part(job_id)}.{token_hash(token)}.{rank}.{_base36(int(now or time.time()))}"


def parse_name(name: str | None) -> dict[str, Any] | None:
    """{job, token, rank, created} of a launchpad instance name; None for any other instance."""
    m = _NAME.match(name or "")
    if not m:
        return None
    return {"job": m["job"], "token": m["token"], "rank": int(m["rank"]), "created": float(int(m["ts"], 36))}


def job_of(inst: dict[str, Any], parsed: dict[str, Any]) -> str:
    """The exact job id: the `launchpad-job` tag when the API returns it, else the name's (maybe cut) job part."""
    for tag in inst.get("tags") or []:
        if tag.get("key") == JOB_TAG and job_part(str(tag.get("value"))) == parsed["job"]:
            return str(tag["value"])
    return str(parsed["job"])


# -- an instance -----------------------------------------------------------------------------------------
def state_of(inst: dict[str, Any] | None) -> InstanceState:
    status = (inst or {}).get("status")
    if inst is None or status in ("terminated", "terminating"):
        return InstanceState.TERMINATED
    return {"booting": InstanceState.PENDING, "active": InstanceState.RUNNING, "preempted": InstanceState.PREEMPTED,
            # health checks failing: it may still bill and cannot be trusted to answer
            "unhealthy": InstanceState.UNKNOWN}.get(str(status), InstanceState.UNKNOWN)


# -- instance types -> offers ------------------------------------------------------------------------------
def canonical_gpu(description: str, known: Iterable[str]) -> str | None:
    """'H100 (80 GB SXM5)' -> 'H100', 'RTX A6000 (48 GB)' -> 'A6000', 'Quadro RTX 6000 (24 GB)' -> 'RTX6000'."""
    words = [w for w in re.sub(r"\(.*?\)", " ", description).upper().split() if w not in _VENDOR_WORDS]
    if not words:
        return None
    names = set(known)
    joined = "".join(words)
    for candidate in (joined, joined.removeprefix("RTX"), words[0]):
        if candidate in names:
            return candidate
    return joined


def offer_of(item: dict[str, Any], region: str, known_gpus: Iterable[str]) -> Offer:
    """One Offer from an `/instance-types` entry's `instance_type` and one region name."""
    specs = item.get("specs") or {}
    gpus = int(specs.get("gpus") or 0)
    desc = str(item.get("gpu_description") or item.get("description") or "")
    memory = _MEMORY.search(desc)
    return Offer(
        provider=NAME, instance_type=str(item["name"]), region=region,
        gpu=canonical_gpu(desc, known_gpus) if gpus else None, gpu_count=gpus,
        gpu_memory_gb=float(memory.group(1)) if gpus and memory else 0.0,
        vcpus=float(specs.get("vcpus") or 0), memory_gb=round(float(specs.get("memory_gib") or 0) * _GIB, 1),
        price_per_hour=int(item.get("price_cents_per_hour") or 0) / 100.0,
        nvme_gb=round(float(specs.get("storage_gib") or 0) * _GIB),  # the instance's local NVMe SSD
    )


def live_offers(types: dict[str, Any], regions: list[str]) -> list[Offer]:
    """An offer per instance type and region WITH capacity now (a sold-out region is not offered: the
    planner must not rank what cannot launch), narrowed by `regions:` globs."""
    from launchpad.planner.settings import planner_settings

    known = list(planner_settings()["gpus"])
    out = []
    for entry in types.values():
        item = entry.get("instance_type") or {}
        for region in entry.get("regions_with_capacity_available") or []:
            name = str(region.get("name") or "")
            if name and (not regions or any(fnmatch.fnmatchcase(name, p) for p in regions)):
                out.append(offer_of(item, name, known))
    return sorted(out, key=lambda o: (o.price_per_hour, o.instance_type, o.region))
