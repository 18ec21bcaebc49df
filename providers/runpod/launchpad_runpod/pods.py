"""What a RunPod pod and a GPU type say, read for launchpad: names, identity, states, the SSH endpoint, the
container image, and offers built from the GPU types.

Identity without local state: a pod is named ``launchpad-<job>-<hash(token)>-<rank>`` (RunPod pods have no
tags or labels), so `instances()` finds launchpad's pods by the name prefix, and the exact job id, attempt
token and offer travel as environment variables of the pod (``LAUNCHPAD_JOB``, ``LAUNCHPAD_CLUSTER``,
``LAUNCHPAD_OFFER``), which the API returns with the pod.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from launchpad.gpuspec import canonical_gpu_name
from launchpad.images import Image, cuda_tuple, pick_image
from launchpad.models import JOB_TAG, InstanceState, Offer

from .api import NAME

PREFIX = "launchpad-"
JOB_ENV, CLUSTER_ENV, OFFER_ENV, TAGS_ENV = "LAUNCHPAD_JOB", "LAUNCHPAD_CLUSTER", "LAUNCHPAD_OFFER", "LAUNCHPAD_TAGS"
NAME_MAX = 60  # dstack's note: RunPod accepts names of 60 characters
SECURE, COMMUNITY = "secure", "community"  # the regions of live offers: RunPod picks the data center
COUNTS = (1, 2, 4, 8)

# RunPod's official PyTorch images (Docker Hub runpod/pytorch, built from github.com/runpod/containers,
# official-templates/pytorch): CUDA devel + Python + PyTorch, with sshd started from $PUBLIC_KEY by the
# image's /start.sh. Oldest first; `pick_image` takes the newest that meets the recipe's CUDA need and the
# host's driver. Config `image:` replaces the choice (the image must start sshd from $PUBLIC_KEY too).
IMAGES = (
    Image("runpod/pytorch:2.1.0-py3.10-cuda11.8.0-devel-ubuntu22.04", "11.8.0", "3.10"),
    Image("runpod/pytorch:2.2.0-py3.10-cuda12.1.1-devel-ubuntu22.04", "12.1.1", "3.10"),
    Image("runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04", "12.4.1", "3.11"),
    Image("runpod/pytorch:2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04", "12.8.1", "3.11"),
)
# The host CUDA versions RunPod's `allowedCudaVersions` filter takes (its console's "CUDA version" list): a
# pod is placed only on a host whose driver runs one of those at least as new as the image's CUDA.
HOST_CUDA = ("11.8", "12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.7", "12.8", "12.9", "13.0")

# RunPod GPU type ids that launchpad's generic canonicaliser reads wrongly, rewritten before it runs
_GPU_REWRITES = (
    (re.compile(r"\b(\d{4}) (?:SFF )?Ada Generation\b"), r"\1 Ada"),  # "RTX 6000 Ada Generation" -> RTX6000ADA
    (re.compile(r"\bRTX A(\d{4})\b"), r"A\1"),  # "RTX A4500" -> A4500
    (re.compile(r"^AMD Instinct (\w+).*$"), r"\1"),  # "AMD Instinct MI300X OAM" -> MI300X
    (re.compile(r"\bRTX PRO (\d{4}) Blackwell Workstation.*$"), r"RTXPRO\1WS"),
    (re.compile(r"\bRTX PRO (\d{4}) Blackwell.*$"), r"RTXPRO\1"),
)
_POD_ID = re.compile(r"^[a-z0-9]{6,40}$")


def gpu_name(gpu_type_id: str) -> str:
    """RunPod's GPU type id ("NVIDIA A100 80GB PCIe", "NVIDIA H100 80GB HBM3") -> launchpad's name ("A100", "H100")."""
    text = gpu_type_id
    for pattern, repl in _GPU_REWRITES:
        text = pattern.sub(repl, text)
    return canonical_gpu_name(text)


def newest_cuda() -> str:
    return ".".join(str(p) for p in (cuda_tuple(IMAGES[-1].cuda) or ())[:2])


def choose_image(need: str | None, host_max: str | None, override: str | None = None) -> tuple[str, list[str]]:
    """(image, allowedCudaVersions): the newest of IMAGES with CUDA >= `need` that a host with CUDA
    `host_max` runs (NoCapacity when none), and the host CUDA versions that can run it. `override`
    (config `image:`) is used as given, with no host filter."""
    if override:
        return override, []
    image = pick_image(IMAGES, need=need, host_max=host_max, provider=NAME)
    floor = (cuda_tuple(image.cuda) or (0,))[:2]
    return image.ref, [v for v in HOST_CUDA if (cuda_tuple(v) or (0,)) >= floor]


def offers_from(gpu_types: Iterable[Mapping[str, Any]], clouds: Iterable[str]) -> list[Offer]:
    """On-demand offers (each with its interruptible price) of 1/2/4/8 GPUs of every type, per cloud."""
    out: list[Offer] = []
    cuda = newest_cuda()  # what a pod gets at most: the newest image (a recipe needing more is refused by the plan)
    for t in gpu_types:
        if not t.get("id") or not (t.get("memoryInGb") or 0):
            continue
        for cloud in clouds:
            price = t.get(f"{cloud}Price")
            if not t.get(f"{cloud}Cloud", True) or not price:
                continue
            spot = t.get(f"{cloud}SpotPrice") or None
            most = int(t.get(f"maxGpuCount{cloud.capitalize()}Cloud") or t.get("maxGpuCount") or 8)
            for n in (c for c in COUNTS if c <= most):
                out.append(Offer(NAME, str(t["id"]), cloud, None, gpu_name(str(t["id"])), n, float(t["memoryInGb"]),
                                 price_per_hour=round(float(price) * n, 4),
                                 spot_price_per_hour=round(float(spot) * n, 4) if spot else None, cuda=cuda))
    return out


def cloud_args(region: str) -> dict[str, Any]:
    """The deploy input's placement for an offer's region: a live offer's cloud ("secure"/"community",
    any data center), or a snapshot offer's data center id ("EU-RO-1": Secure Cloud) or country ("CA":
    Community Cloud), as RunPod's catalogs name them."""
    if region in (SECURE, COMMUNITY):
        return {"cloudType": region.upper()}
    if "-" in region:
        return {"cloudType": "SECURE", "dataCenterId": region}
    return {"cloudType": "COMMUNITY", "countryCode": region}


def pod_name(job_id: str, token: str, rank: int = 0) -> str:
    job = re.sub(r"[^A-Za-z0-9_.-]+", "-", job_id)[: NAME_MAX - len(PREFIX) - 12]
    return f"{PREFIX}{job}-{hashlib.sha256(token.encode()).hexdigest()[:8]}-{rank}"


def pod_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """The pod's environment as the API returns it: ["KEY=value", ...] (or [{key, value}, ...])."""
    out: dict[str, str] = {}
    for item in pod.get("env") or []:
        if isinstance(item, str) and "=" in item:
            k, v = item.split("=", 1)
            out[k] = v
        elif isinstance(item, Mapping) and item.get("key"):
            out[str(item["key"])] = str(item.get("value") or "")
    return out


def identity(pod: Mapping[str, Any]) -> tuple[str, str, dict[str, str]] | None:
    """(job id, attempt token, tags) of a launchpad pod, or None when the pod is not launchpad's."""
    name = str(pod.get("name") or "")
    if not name.startswith(PREFIX):
        return None
    env = pod_env(pod)
    job = env.get(JOB_ENV) or re.sub(r"-[0-9a-f]{8}-\d+$", "", name[len(PREFIX):])
    try:
        tags = {str(k): str(v) for k, v in json.loads(env.get(TAGS_ENV) or "{}").items()}
    except (ValueError, AttributeError):
        tags = {}
    return job, env.get(CLUSTER_ENV) or name, {**tags, JOB_TAG: job}


def is_interruptible(pod: Mapping[str, Any]) -> bool:
    return str(pod.get("podType") or "").upper() in ("INTERRUPTABLE", "INTERRUPTIBLE", "SPOT")


def state_of(pod: Mapping[str, Any] | None) -> InstanceState:
    """RUNNING once the container runs with its SSH port mapped; a stopped interruptible pod is PREEMPTED
    (RunPod stops such a pod when it reclaims the GPU; the API does not say who stopped it)."""
    if pod is None:
        return InstanceState.TERMINATED
    status = str(pod.get("desiredStatus") or "").upper()
    if status in ("TERMINATED", "DEAD"):
        return InstanceState.TERMINATED
    if status in ("EXITED", "PAUSED"):
        return InstanceState.PREEMPTED if is_interruptible(pod) else InstanceState.STOPPED
    if status == "RUNNING" and ssh_endpoint(pod) is not None:
        return InstanceState.RUNNING
    return InstanceState.PENDING  # CREATED, RESTARTING, or RUNNING while the image is pulled


def ssh_endpoint(pod: Mapping[str, Any]) -> tuple[str, int] | None:
    """The pod's public IP and the port RunPod maps to its port 22 (``runtime.ports``), or None."""
    for p in ((pod.get("runtime") or {}).get("ports") or []):
        if p.get("privatePort") == 22 and p.get("isIpPublic") and p.get("ip") and p.get("publicPort"):
            return str(p["ip"]), int(p["publicPort"])
    return None


def safe_pod_id(pod_id: str) -> str:
    """A pod id fit for the SDK's mutations, which interpolate it unescaped."""
    if not _POD_ID.match(pod_id or ""):
        raise ValueError(f"{pod_id!r} is not a RunPod pod id")
    return pod_id
