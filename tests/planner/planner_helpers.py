"""Helpers for the planner tests: a static provider (a real Provider subclass whose offers come from its
config, like a provider with a fixed price list) and an offer factory."""

from __future__ import annotations

from launchpad.models import Capability, Offer
from launchpad.provider import Provider


class StaticProvider(Provider):
    """A provider selling a fixed list of offers; lifecycle methods are not used by the planner."""

    name = "static"

    def check(self):
        return None

    def offers(self):
        return list(self.config["offers"])

    def provision(self, offer, spec):  # pragma: no cover - not planner business
        raise NotImplementedError

    sync = train = progress = logs = checkpoint = teardown = status = provision  # type: ignore[assignment]

    def instances(self):  # pragma: no cover
        return []


def static_provider(name: str, offers: list[Offer], unsupported: dict[Capability, str] | None = None) -> Provider:
    cls = type(f"Static_{name}", (StaticProvider,), {"name": name, "unsupported": dict(unsupported or {})})
    return cls({"offers": offers})


def gpu_offer(provider: str = "p", instance_type: str = "g1", *, gpu: str | None = "A100", count: int = 1,
              mem: float = 80, price: float = 2.0, spot: float | None = None, region: str = "us-east-1",
              zone: str | None = None, cuda: str | None = "12.4", nvme: float = 0.0,
              interconnect: str | None = None, vcpus: float | None = None, ram: float | None = None) -> Offer:
    """A GPU offer; its host scales with the GPU count (12 vCPUs, 96 GB RAM per GPU) unless given."""
    n = max(1, count)
    return Offer(provider=provider, instance_type=instance_type, region=region, zone=zone, gpu=gpu,
                 gpu_count=count if gpu else 0, gpu_memory_gb=mem if gpu else 0.0,
                 vcpus=12 * n if vcpus is None else vcpus, memory_gb=96 * n if ram is None else ram,
                 price_per_hour=price, spot_price_per_hour=spot, nvme_gb=nvme, cuda=cuda,
                 interconnect=interconnect)
