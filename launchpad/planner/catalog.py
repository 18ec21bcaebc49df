"""The offer catalog (``configs/catalog/<provider>.csv``, built by `build_catalog`) and provider facts
(``configs/providers.yaml``) resolved per instance type.

Loading the committed snapshot (~3k GPU offers) takes a few milliseconds, so there is no parsed cache;
`load_catalog` is memoised per process. Provider plugins may serve `catalog_offers(name)` from `offers()`.
"""

from __future__ import annotations

import csv
import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from ..config_dir import config_path
from ..models import Offer
from .settings import provider_facts


@dataclass(frozen=True)
class Facts:
    """What configs/providers.yaml says about one provider's instance type (defaults when it says nothing)."""

    provider: str
    known: bool = False  # providers.yaml has a section for this provider
    boot_s: float = 120.0
    nvme_gb: float = 0.0  # mounted by default
    nvme_share: float = 0.0  # 0 < x < 1: share of hosts with NVMe (marketplaces): not guaranteed
    cuda: str | None = None
    nvlink: bool = False
    fabric: str = "ethernet"
    fabric_gbps: float | None = None  # inter-node bandwidth promised per node (all NICs), Gb/s; None = unknown
    stop: bool = True
    spot: bool = True
    multi_node: bool = True
    load_10gb_s: float = 100.0
    egress_per_gb: float = 0.09
    interregion_per_gb: float = 0.02  # between two regions of the same cloud (launchpad.planner.egress)
    # USD per GB-month of the block volume the instance boots from; it also bills while the instance is
    # stopped. 0 = part of the instance price (local disk only) or not known: nothing is added.
    disk_per_gb_month: float = 0.0
    availability: float = 0.5
    cost_transparency: float = 0.5
    ops: float = 0.5
    compliance: float = 0.5
    sources: Mapping[str, str] | None = None

    def source(self, key: str) -> str:
        return (self.sources or {}).get(key, "")

    @property
    def interconnect(self) -> str:
        return f"{'nvlink' if self.nvlink else 'pcie'}+{self.fabric}"


_FACT_KEYS = {f for f in Facts.__dataclass_fields__} - {"provider", "known", "sources", "nvme_share"}


@lru_cache(maxsize=4096)
def facts_for(provider: str, instance_type: str = "") -> Facts:
    """Provider facts with the `instances` overrides whose glob matches `instance_type` applied in file order."""
    section: Mapping[str, Any] = provider_facts().get(provider) or {}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    layers = [section] + [ov for glob, ov in (section.get("instances") or {}).items()
                          if instance_type and fnmatch.fnmatchcase(instance_type, glob)]
    for layer in layers:
        for k, v in layer.items():
            if k in _FACT_KEYS and v is not None:
                values[k] = v
            elif k == "cuda":
                values.pop("cuda", None)
        sources.update(layer.get("sources") or {})
    nvme = float(values.pop("nvme_gb", 0) or 0)
    share = 0.0
    if 0 < nvme < 1:  # a share of hosts, not a size
        share, nvme = nvme, 0.0
    if "cuda" in values:
        values["cuda"] = str(values["cuda"])
    return Facts(provider=provider, known=bool(section), nvme_gb=nvme, nvme_share=share, sources=sources, **values)


def with_facts(offer: Offer) -> Offer:
    """Fill what the offer leaves unknown (NVMe, CUDA, interconnect) from providers.yaml."""
    f = facts_for(offer.provider, offer.instance_type)
    changes: dict[str, Any] = {}
    if not offer.nvme_gb and f.nvme_gb:
        changes["nvme_gb"] = f.nvme_gb
    if offer.cuda is None and f.cuda:
        changes["cuda"] = f.cuda
    if offer.interconnect is None and offer.gpu:
        changes["interconnect"] = f.interconnect
    return replace(offer, **changes) if changes else offer


def _f(text: str) -> float:
    return float(text) if text else 0.0


def read_catalog_csv(provider: str, path) -> list[Offer]:
    """Offers of one normalised catalog file (columns: `build_catalog.COLUMNS`), facts applied."""
    out: list[Offer] = []
    cache: dict[str, tuple[float, str | None, str]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        rows = csv.reader(fh)
        next(rows, None)
        for itype, region, zone, gpu, count, mem, vcpus, ram, price, spot in rows:
            if itype not in cache:
                f = facts_for(provider, itype)
                cache[itype] = (f.nvme_gb, f.cuda, f.interconnect)
            nvme, cuda, ic = cache[itype]
            out.append(Offer(provider, itype, region, zone or None, gpu or None, int(count), _f(mem), _f(vcpus),
                             _f(ram), float(price), float(spot) if spot else None, False, nvme, cuda,
                             ic if gpu else None))
    return out


@lru_cache(maxsize=1)
def _catalog() -> dict[str, tuple[Offer, ...]]:
    folder = config_path("catalog")
    return {p.stem: tuple(read_catalog_csv(p.stem, p)) for p in sorted(folder.glob("*.csv"))}


def catalog_providers() -> list[str]:
    """Provider names the bundled catalog has offers for."""
    return list(_catalog())


def load_catalog(providers: Iterable[str] | None = None) -> dict[str, tuple[Offer, ...]]:
    """Catalog offers by provider (all providers when `providers` is None). On-demand offers; each carries
    its spot price (None = no spot market) and the planner derives spot variants."""
    cat = _catalog()
    if providers is None:
        return dict(cat)
    return {p: cat[p] for p in providers if p in cat}


def catalog_offers(provider: str) -> list[Offer]:
    """One provider's catalog offers: what a provider plugin's `offers()` can return when it has no live API."""
    return list(_catalog().get(provider, ()))
