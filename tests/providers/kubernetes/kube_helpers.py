"""Helpers of the kubernetes provider's tests: clusters the double plays (a generic one with NVIDIA GPU
feature discovery labels, a CoreWeave-style one with per-model resource names), a kubeconfig naming them,
and the provider's settings."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import yaml

from launchpad.models import JOB_TAG, InstanceSpec

GFD_NODES = [
    {"name": "gpu-a100-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920",
                                      "nvidia.com/gpu.count": "8"},
     "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1000Gi"},
     "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
    {"name": "gpu-t4-1", "labels": {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.memory": "15360"},
     "allocatable": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "30Gi"}},
    {"name": "cpu-1", "labels": {}, "allocatable": {"cpu": "16", "memory": "64Gi"}},
]
# CoreWeave: the GPU model is in the resource name and in the `gpu.nvidia.com/class` label
COREWEAVE_NODES = [
    {"name": "cw-a100-1", "labels": {"gpu.nvidia.com/class": "A100_NVLINK_80GB", "topology.kubernetes.io/region": "LGA1"},
     "allocatable": {"nvidia.com/gpu-a100-80gb": "8", "cpu": "96", "memory": "960Gi"}},
    {"name": "cw-h100-1", "labels": {"gpu.nvidia.com/class": "H100_NVLINK_80GB", "topology.kubernetes.io/region": "LGA1"},
     "allocatable": {"nvidia.com/gpu-h100-80gb": "8", "cpu": "128", "memory": "1500Gi"}},
]


def write_kubeconfig(path: Path, entries: list[dict], current: str) -> Path:
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": current,
           "clusters": [e["cluster"] for e in entries], "users": [e["user"] for e in entries],
           "contexts": [e["context"] for e in entries]}
    path.write_text(yaml.safe_dump(doc))
    return path


def settings(tmp_path: Path, kubeconfig: Path, **extra) -> dict:
    cfg = {
        "kubeconfig": str(kubeconfig), "image": "launchpad-test:local", "python": sys.executable,
        "mount_path": str(tmp_path / "mnt"), "schedule_timeout": 3, "boot_timeout": 30, "grace_seconds": 3,
        "poll_seconds": 0.2, "teardown_wait": 30, "start_grace": 1.5, "prices": {"A100": 1.6, "T4": 0.35, "H100": 4.0},
        "checkpoint_uri": f"file://{tmp_path / 'store'}",
    }
    cfg.update(extra)
    return cfg


def spec_for(job_id: str, token: str | None = None, **kw) -> InstanceSpec:
    return InstanceSpec(job_id=job_id, token=token or f"{job_id}-t1", tags={JOB_TAG: job_id}, **kw)


def offer_of(provider, gpu: str, count: int = 1, region: str | None = None):
    return next(o for o in provider.offers() if o.gpu == gpu and o.gpu_count == count and (region is None or o.region == region))


def wait_for(fn, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not met in time")
