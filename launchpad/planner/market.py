"""What the market has (``launchpad offers``, like ``dstack offer``): every offer matching a GPU spec,
spot choice and regions, configured provider or not, cheapest first. No recipe, no VRAM estimate."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import BadInput, ProviderError
from ..gpuspec import GpuSpec, check_gpu_names, parse_gpu_spec
from ..models import Offer
from .catalog import load_catalog, with_facts


@dataclass(frozen=True)
class MarketOffer:
    offer: Offer
    configured: bool


def parse_wanted_gpu(text: str) -> GpuSpec:
    """A GPU spec a user asks for (`offers --gpu`): syntax and known names checked. Raises `BadInput`
    naming the option, the problem and the closest known names."""
    try:
        spec = parse_gpu_spec(text)
        check_gpu_names(spec, text)
    except ValueError as exc:
        raise BadInput(f"--gpu: {exc}") from None
    return spec


def market(gpu: str | GpuSpec | None = None, *, spot: bool = False, regions: Sequence[str] = (),
           providers: Mapping[str, Any] | None = None, only_providers: Sequence[str] = (),
           max_price: float | None = None, include_catalog: bool = True,
           catalog: Mapping[str, Sequence[Offer]] | None = None) -> list[MarketOffer]:
    """Offers matching `gpu` (a spec or its text; None = any GPU offer), cheapest first. `spot` lists spot
    variants (offers with a known spot price) instead of on-demand. Configured `providers` contribute
    their own `offers()`; the catalog covers the rest (configured=False). Raises `BadInput` for a bad spec."""
    spec = parse_wanted_gpu(gpu) if isinstance(gpu, str) and gpu else gpu or None
    region_re = re.compile("|".join(fnmatch.translate(g) for g in regions)) if regions else None
    only = set(only_providers)
    sources: list[tuple[Sequence[Offer], bool]] = []
    done: set[str] = set()
    for name, prov in (providers or {}).items():
        if only and name not in only:
            continue
        try:
            sources.append(([with_facts(o) for o in prov.offers()], True))
            done.add(name)
        except ProviderError:
            continue
    if include_catalog:
        for name, offers in (catalog if catalog is not None else load_catalog()).items():
            if name not in done and (not only or name in only):
                sources.append((offers, False))
    out: list[MarketOffer] = []
    match_cache: dict[tuple, bool] = {}
    for offers, configured in sources:
        for o in offers:
            if not o.gpu:
                continue
            key = (o.gpu, o.gpu_memory_gb, o.gpu_count)
            ok = match_cache.get(key)
            if ok is None:
                ok = match_cache[key] = spec is None or spec.matches(o.gpu, o.gpu_memory_gb, o.gpu_count)
            if not ok:
                continue
            if region_re is not None and not (region_re.match(o.region) or (o.zone and region_re.match(o.zone))):
                continue
            if spot:
                if o.spot_price_per_hour is None:
                    continue
                o = replace(o, spot=True)
            if max_price is not None and o.price > max_price:
                continue
            out.append(MarketOffer(o, configured))
    out.sort(key=lambda m: (m.offer.price, not m.configured, m.offer.provider, m.offer.instance_type,
                            m.offer.region, m.offer.zone or ""))
    return out
