"""What a Compute Engine VM resource (the REST API's JSON) says, read the same way everywhere, and the
names and labels launchpad gives VMs."""

from __future__ import annotations

import hashlib
import re

from launchpad.models import InstanceSpec, InstanceState, Offer

_STOPPED = ("STOPPING", "SUSPENDING", "SUSPENDED", "TERMINATED")  # TERMINATED is GCE's "stopped"


def label_value(value: str) -> str:
    """`value` as a GCE label value (<= 63 of [a-z0-9_-]); too long ones keep a hash suffix, so still unique."""
    clean = re.sub(r"[^a-z0-9_-]", "-", value.lower())
    return clean if len(clean) <= 63 else f"{clean[:50]}-{hashlib.sha256(value.encode()).hexdigest()[:12]}"


def vm_name(token: str, rank: int) -> str:
    return f"lp-{hashlib.sha256(token.encode()).hexdigest()[:16]}-{rank}"


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def meta(inst: dict, key: str) -> str | None:
    return next((i.get("value") for i in (inst.get("metadata") or {}).get("items") or [] if i.get("key") == key), None)


def machine_type(inst: dict) -> str:
    return str(inst.get("machineType") or "").rsplit("/", 1)[-1]


def is_spot(inst: dict) -> bool:
    sched = inst.get("scheduling") or {}
    return sched.get("provisioningModel") == "SPOT" or bool(sched.get("preemptible"))


def wants_local_ssd(offer: Offer, spec: InstanceSpec) -> bool:
    """Attach a local SSD: the recipe wants NVMe and the machine type has none of its own (N1, A2 High)."""
    return spec.disk == "nvme" and not offer.nvme_gb and offer.instance_type.startswith(("n1-", "a2-highgpu", "a2-megagpu"))


def public_ip(inst: dict) -> str | None:
    for nic in inst.get("networkInterfaces") or []:
        for ac in nic.get("accessConfigs") or []:
            if ac.get("natIP"):
                return str(ac["natIP"])
    return None


def private_ip(inst: dict) -> str | None:
    nics = inst.get("networkInterfaces") or []
    return str(nics[0]["networkIP"]) if nics and nics[0].get("networkIP") else None


def state_of(inst: dict) -> InstanceState:
    status = inst.get("status")
    if status in ("PROVISIONING", "STAGING", "REPAIRING"):
        return InstanceState.PENDING
    if status == "RUNNING":
        return InstanceState.RUNNING
    if status in _STOPPED:
        return InstanceState.STOPPED
    return InstanceState.UNKNOWN


def created_at(inst: dict) -> float | None:
    import datetime as dt

    stamp = inst.get("creationTimestamp")
    try:
        return dt.datetime.fromisoformat(str(stamp)).timestamp() if stamp else None
    except ValueError:
        return None
