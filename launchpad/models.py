"""Frozen domain objects shared by the planner, the providers, the lifecycle and the CLI.

Recipes are pydantic (they come from users); everything launchpad makes itself is a frozen dataclass.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .jobspec import JobSpec

JOB_TAG = "launchpad-job"  # every resource launchpad creates carries this tag: the reaper finds it by it


class JobState(str, enum.Enum):
    PENDING = "PENDING"
    PROVISIONING = "PROVISIONING"
    SYNCING = "SYNCING"
    TRAINING = "TRAINING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    INTERRUPTED = "INTERRUPTED"

    @property
    def finished(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.INTERRUPTED)


class InstanceState(str, enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    STOPPED = "stopped"
    PREEMPTED = "preempted"
    TERMINATED = "terminated"  # gone: nothing left to bill
    UNKNOWN = "unknown"  # cannot be reached or named any more (e.g. its host left hosts.yaml): may still bill


class TeardownMode(str, enum.Enum):
    STOP = "stop"
    TERMINATE = "terminate"


class Capability(str, enum.Enum):
    STOP = "stop"  # can stop (not only terminate) an instance
    SPOT = "spot"
    MULTI_NODE = "multi_node"
    NVME = "nvme"


@dataclass(frozen=True)
class Offer:
    """Something a provider can sell: one instance type in one place at one price."""

    provider: str
    instance_type: str
    region: str
    zone: str | None = None
    gpu: str | None = None  # canonical accelerator name ("A100", "H100"); None = CPU only
    gpu_count: int = 0
    gpu_memory_gb: float = 0.0  # per GPU
    vcpus: float = 0.0
    memory_gb: float = 0.0
    price_per_hour: float = 0.0  # on-demand, USD per instance-hour
    spot_price_per_hour: float | None = None  # None = no spot market (or unknown)
    spot: bool = False  # this offer is the spot variant
    nvme_gb: float = 0.0  # local NVMe (instance store)
    cuda: str | None = None  # preinstalled CUDA, "12.4"
    interconnect: str | None = None  # "nvlink", "infiniband", "roce", ...
    # This offer's own host figures, where a marketplace (Vast.ai) reports them per machine; None = not known,
    # the provider-wide facts of configs/providers.yaml apply (availability, load_10gb_s).
    reliability: float | None = None  # 0..1, the host's reliability score
    disk_mb_s: float | None = None  # the host's disk bandwidth, MB/s
    inet_down_mbps: float | None = None  # the host's download speed, Mb/s
    host_cuda_max: str | None = None  # the newest CUDA the host's driver runs (a container's CUDA must not exceed it)

    @property
    def price(self) -> float:
        """What this offer bills per hour as offered (spot price for spot offers)."""
        if self.spot and self.spot_price_per_hour is not None:
            return self.spot_price_per_hour
        return self.price_per_hour

    @property
    def label(self) -> str:
        gpu = f"{self.gpu}:{self.gpu_count}" if self.gpu else "cpu"
        where = self.zone or self.region
        return f"{self.provider}/{self.instance_type} ({gpu}, {where}{', spot' if self.spot else ''})"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Offer:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class InstanceSpec:
    """What provision() is asked for. `token` makes provision idempotent: the same token, the same instance."""

    job_id: str
    token: str
    tags: Mapping[str, str] = field(default_factory=dict)
    nodes: int = 1
    disk: str = "any"  # "nvme" | "any"
    autostop_idle_minutes: int | None = None
    autostop_action: TeardownMode = TeardownMode.STOP
    disk_gb: int = 0  # root/boot volume the plan asks for (0 = the provider's default)
    cuda: str | None = None  # the recipe's `resources.cuda` (minimum): container providers pick their image by it


@dataclass(frozen=True)
class Instance:
    """A machine (or, for `local`, a work directory plus processes) that a provider made for a job."""

    provider: str
    id: str
    job_id: str
    state: InstanceState
    offer: Offer | None = None
    address: str | None = None
    created_at: float | None = None
    data: Mapping[str, Any] = field(default_factory=dict)  # provider-specific, JSON-serialisable

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["state"] = self.state.value
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Instance:
        offer = data.get("offer")
        return cls(
            provider=data["provider"],
            id=data["id"],
            job_id=data["job_id"],
            state=InstanceState(data["state"]),
            offer=Offer.from_dict(offer) if offer else None,
            address=data.get("address"),
            created_at=data.get("created_at"),
            data=dict(data.get("data") or {}),
        )


@dataclass(frozen=True)
class CheckpointRef:
    """A complete checkpoint in the object store: its manifest was written and verifies."""

    uri: str  # <checkpoint.uri>/<job-id>/checkpoint-<step>
    step: int
    files: int = 0
    bytes: int = 0
    created_at: float | None = field(default=None, compare=False)  # when its manifest was written (unix time)

    @property
    def name(self) -> str:
        return f"checkpoint-{self.step}"


@dataclass(frozen=True)
class Bundle:
    """What sync() pushes to an instance: the job spec and the recipe text."""

    job_spec: JobSpec
    recipe_text: str
    env: Mapping[str, str] = field(default_factory=dict)  # resolved at launch; never stored or logged


@dataclass(frozen=True)
class TrainHandle:
    instance_id: str
    pid: int | None = None
    started_at: float | None = None


@dataclass(frozen=True)
class JobProgress:
    """What the instance reports in status.json (written by the trainer/agent), read without parsing logs."""

    phase: str = "pending"  # pending | prewarm | loading | training | saving | done | failed
    step: int = 0
    total_steps: int | None = None
    loss: float | None = None
    tokens_per_s: float | None = None
    last_checkpoint: str | None = None  # uri of the newest complete checkpoint
    last_checkpoint_step: int | None = None
    resumed_from_step: int | None = None
    heartbeat: float | None = None
    running: bool = False  # a trainer process is alive
    exit_code: int | None = None
    error: str | None = None
    losses: tuple[tuple[int, float], ...] = ()
    eval_losses: tuple[tuple[int, float], ...] = ()
    step_seconds: float | None = None  # mean seconds per step since the first one (the ETA's basis)
    prewarm_done_bytes: int = 0
    prewarm_total_bytes: int = 0
    warning: str | None = None  # e.g. "no local NVMe: pre-warming to the largest local disk"
    #: when each phase began on the instance (unix time, the instance's clock): the agent's (starting,
    #: prewarm, prewarm_done, trainer_start, uploading, done ...) and the trainer's (loading, training,
    #: first_step = the first optimizer step completed); see launchpad.phases
    phase_times: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def from_status(cls, status: Mapping[str, Any], *, running: bool, exit_code: int | None) -> JobProgress:
        ckpt = status.get("last_checkpoint") or {}
        resumed = status.get("resumed_from") or {}
        prewarm = status.get("prewarm") or {}
        return cls(
            phase=status.get("phase", "pending"),
            step=int(status.get("step") or 0),
            total_steps=status.get("total_steps"),
            loss=status.get("loss"),
            tokens_per_s=status.get("tokens_per_s"),
            last_checkpoint=ckpt.get("uri"),
            last_checkpoint_step=ckpt.get("step"),
            resumed_from_step=resumed.get("step"),
            heartbeat=status.get("heartbeat"),
            running=running,
            exit_code=exit_code,
            error=status.get("error"),
            losses=tuple((int(s), float(loss)) for s, loss in status.get("losses", [])),
            eval_losses=tuple((int(s), float(loss)) for s, loss in status.get("eval_losses") or []),
            step_seconds=status.get("step_seconds"),
            prewarm_done_bytes=int(prewarm.get("done_bytes") or 0),
            prewarm_total_bytes=int(prewarm.get("total_bytes") or 0),
            warning=prewarm.get("warning"),
            phase_times={str(k): float(v) for k, v in (status.get("phase_times") or {}).items()
                         if isinstance(v, (int, float))},
        )
