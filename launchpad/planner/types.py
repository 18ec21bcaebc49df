"""The planner's frozen results: `Need` (what a recipe needs), `RankedOffer`, `Rejection`, `Plan`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..models import Offer

if TYPE_CHECKING:
    from ..gpuspec import GpuSpec
    from .memory import MemoryEstimate, ModelShape


@dataclass(frozen=True)
class Need:
    """What a recipe needs from an offer. Hard constraints read it; the estimate uses it.

    `vram_gb` is the per-GPU need at the smallest world size the recipe allows (ZeRO shards more over more
    GPUs: `vram_for(world)`); None when the model's shape is unknown (then VRAM is not checked, and
    `notes` says so). `needs_stop` is True only when the recipe *explicitly* sets `autostop.action: stop`:
    with the default, a provider that can only terminate is fine, since checkpoints live in the object store.
    """

    gpu: GpuSpec | None = None  # None: CPU offers qualify too (small models only, see cpu_max_params)
    gpu_text: str | None = None
    nodes: int = 1
    vram_gb: float | None = None
    cuda_min: str | None = None
    nvme: bool = False
    regions: tuple[str, ...] = ()
    spot: bool | str = False  # False | True | "auto"
    max_price: float | None = None  # USD/h for the whole job (all nodes)
    providers: tuple[str, ...] = ()  # allow-list; empty = any
    needs_stop: bool = False
    adapter: str = "lora"
    model: str = ""
    params: int = 0
    shape: ModelShape | None = None
    memory: MemoryEstimate | None = None
    # Tokens to train: max_steps x tokens per step per GPU x world, or dataset tokens x epochs.
    max_steps: int | None = None
    tokens_per_step_per_gpu: int = 0
    dataset_tokens: float = 0.0
    epochs: float = 1.0
    tokens_source: str = ""
    dataset_bytes: float = 0.0
    download_bytes: float = 0.0  # base model weights fetched at pre-warm
    checkpoint_bytes: float = 0.0  # the final checkpoint (adapter or full weights) leaving the cloud
    checkpoint_uri: str | None = None  # the recipe's store; None = the provider's default (launchpad.planner.egress)
    gradient_checkpointing: bool = False
    # The host (CPU side) per node: RAM = host_ram_gb + host_ram_per_gpu_gb x GPUs on the node, vCPUs =
    # host_cpus_per_gpu x GPUs (at least that many for a CPU-only job); `host_why` says where RAM comes from.
    host_ram_gb: float = 0.0
    host_ram_per_gpu_gb: float = 0.0
    host_cpus_per_gpu: int = 0
    host_why: str = ""
    # The root volume of each node, GiB (launchpad.planner.disk): weights, datasets, local checkpoints, env,
    # OS, headroom; 0 = not estimated (no volume cost). `autostop_action`: what an idle machine does
    # (stop keeps the volume billing: the plan shows that cost per day).
    disk_gb: int = 0
    disk_why: str = ""
    autostop_action: str = "stop"
    notes: tuple[str, ...] = ()

    def vram_for(self, world_size: int) -> float | None:
        if self.memory is None:
            return self.vram_gb
        return self.memory.per_gpu_gb(world_size)

    def host_ram_for(self, gpus: int) -> float:
        """GB of host RAM one node with `gpus` GPUs needs."""
        return self.host_ram_gb + self.host_ram_per_gpu_gb * max(1, gpus)

    def host_cpus_for(self, gpus: int) -> int:
        return self.host_cpus_per_gpu * max(1, gpus)

    def tokens(self, world_size: int) -> float:
        if self.max_steps:
            return float(self.max_steps * self.tokens_per_step_per_gpu * max(1, world_size))
        return self.dataset_tokens * self.epochs

    def summary(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu_text, "nodes": self.nodes,
            "vram_gb_per_gpu": None if self.vram_gb is None else round(self.vram_gb, 1),
            "model": self.model, "params": self.params, "adapter": self.adapter,
            "cuda_min": self.cuda_min, "nvme": self.nvme, "regions": list(self.regions),
            "spot": self.spot, "max_price": self.max_price, "providers": list(self.providers),
            "needs_stop": self.needs_stop, "tokens": self.tokens(1), "tokens_source": self.tokens_source,
            "host_ram_gb": round(self.host_ram_for(self.gpu.count_min if self.gpu else 1), 1),
            "host_vcpus": self.host_cpus_for(self.gpu.count_min if self.gpu else 1), "host_why": self.host_why,
            "disk_gb": self.disk_gb, "disk_why": self.disk_why, "autostop_action": self.autostop_action,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class RankedOffer:
    """A feasible offer. `score` is the weighted 0..1 quality; `scores` its dimensions (0..1 each)."""

    offer: Offer
    score: float
    scores: Mapping[str, float]
    est_hours: float
    est_cost: float
    # boot_s, prewarm_s, train_s, egress_usd, disk_usd (the root volumes over est_hours, in est_cost);
    # stopped_usd_per_day only when an idle stop keeps a volume billing; nvme_lost_on_stop 1.0 on NVMe offers
    breakdown: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)  # slots: the planner makes one per rejected offer (~100k)
class Rejection:
    """An offer that cannot run the recipe. `code` groups reasons (vram, gpu, region, not_configured...)."""

    offer: Offer
    reason: str
    code: str = ""
    configured: bool = True


@dataclass(frozen=True)
class Plan:
    need: Need
    ranked: tuple[RankedOffer, ...]
    rejected: tuple[Rejection, ...]
    minimize: str = "cost"
    configured: frozenset[str] = frozenset()  # providers whose offers could be launched now
    notes: tuple[str, ...] = ()
    # Offers of providers that are not configured but pass every hard constraint, ranked like `ranked`
    # (each is also in `rejected` with reason "<name>: not configured (...)"): what the user could get.
    unconfigured: tuple[RankedOffer, ...] = ()

    @property
    def best(self) -> RankedOffer | None:
        return self.ranked[0] if self.ranked else None
