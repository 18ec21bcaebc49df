"""The offer catalog and provider facts (``configs/providers.yaml``) resolved per instance type.

Per provider, the catalog is the file `launchpad catalog refresh` wrote (``<data dir>/catalog/<provider>.csv``
with its ``.meta.json``: fetch time, source, row count; `launchpad.planner.refresh`) when it is there and
readable, else the bundled snapshot (``configs/catalog/<provider>.csv``, built by `build_catalog`, dated by
``configs/catalog/snapshot.yaml``). A refreshed file that cannot be read falls back to the bundle and says why
in `catalog_sources` (the CLI prints it); it never fails a plan.

Loading the committed snapshot (~8k GPU offers) takes a few milliseconds, so there is no parsed cache on
disk: the bundle is parsed once per process, a refreshed file once per (size, mtime). Provider plugins may
serve `catalog_offers(name)` from `offers()`.
"""

from __future__ import annotations

import csv
import fnmatch
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..config_dir import config_path
from ..models import Offer
from .build_catalog import COLUMNS
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
    """The bundled snapshot, parsed once per process."""
    folder = config_path("catalog")
    return {p.stem: tuple(read_catalog_csv(p.stem, p)) for p in sorted(folder.glob("*.csv"))}


# -- refreshed catalogs (`launchpad catalog refresh`) ------------------------------------------------------
def refreshed_dir() -> Path:
    """Where `launchpad catalog refresh` writes ``<provider>.csv`` and ``<provider>.meta.json``."""
    from ..settings import data_dir

    return data_dir() / "catalog"


def meta_path(csv_path: Path) -> Path:
    return csv_path.with_suffix(".meta.json")


@dataclass(frozen=True)
class CatalogSource:
    """Where one provider's catalog offers come from, for `plan`, `offers` and `catalog show`."""

    provider: str
    kind: str  # "refreshed" or "bundled"
    rows: int
    as_of: str  # refreshed: the fetch time (ISO 8601, UTC); bundled: the snapshot's date (snapshot.yaml)
    via: str  # refreshed: the meta's source ("gpuhunt 0.1.34 ..."); bundled: where its prices came from
    path: str
    warning: str | None = None  # why a refreshed file was not used (the bundle was)

    def age_s(self, now: float | None = None) -> float | None:
        when = _parse_time(self.as_of)
        return None if when is None else max(0.0, (now if now is not None else time.time()) - when)

    def label(self, now: float | None = None) -> str:
        """ "refreshed 3 h ago" / "bundled snapshot of 2026-05-20"."""
        if self.kind == "refreshed":
            return f"refreshed {age_text(self.age_s(now))}"
        return f"bundled snapshot of {self.as_of}" if self.as_of else "bundled snapshot"

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        age = self.age_s(now)
        return {"provider": self.provider, "source": self.kind, "rows": self.rows,
                ("fetched_at" if self.kind == "refreshed" else "as_of"): self.as_of,
                "age_s": None if age is None else round(age), "via": self.via, "path": self.path,
                "warning": self.warning}


def age_text(age_s: float | None) -> str:
    if age_s is None:
        return "at an unknown time"
    if age_s < 90:
        return "just now"
    if age_s < 5400:
        return f"{age_s / 60:.0f} min ago"
    if age_s < 48 * 3600:
        return f"{age_s / 3600:.0f} h ago"
    return f"{age_s / 86400:.0f} d ago"


def _parse_time(text: str) -> float | None:
    """An ISO date or time (naive = UTC) -> epoch seconds; None for text like "2026-01..05"."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def _signature(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


@lru_cache(maxsize=32)
def _read_refreshed(provider: str, path: str, sig: tuple[int, int], meta_sig: tuple[int, int] | None
                    ) -> tuple[tuple[Offer, ...], dict[str, Any]] | str:
    """A refreshed catalog and its meta, or why it cannot be used (keyed by the files' size and mtime, so a
    new refresh is read again and a bad file is judged once)."""
    csv_path = Path(path)
    if meta_sig is None:
        return f"{meta_path(csv_path).name} is missing"
    try:
        meta = json.loads(meta_path(csv_path).read_text(encoding="utf-8"))
        if not isinstance(meta, dict) or not isinstance(meta.get("rows"), int) or not meta.get("fetched_at"):
            return f"{meta_path(csv_path).name} has no rows/fetched_at"
        with csv_path.open(newline="", encoding="utf-8") as fh:
            header = next(csv.reader(fh), [])
        if tuple(header) != COLUMNS:
            return f"its header is not {','.join(COLUMNS)}"
        offers = tuple(read_catalog_csv(provider, csv_path))
    except (OSError, UnicodeDecodeError, ValueError, TypeError, csv.Error) as exc:  # json errors are ValueErrors
        return f"cannot read it ({exc})"
    if len(offers) != meta["rows"]:
        return f"it has {len(offers)} rows, its meta says {meta['rows']} (cut short?)"
    return offers, meta


@lru_cache(maxsize=1)
def _bundle_dates() -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(config_path("catalog", "snapshot.yaml").read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _current() -> dict[str, tuple[CatalogSource, tuple[Offer, ...]]]:
    """Per provider: the refreshed catalog when usable, else the bundled one (and why)."""
    bundled = _catalog()
    folder = refreshed_dir()
    refreshed = {p.stem: p for p in sorted(folder.glob("*.csv"))} if folder.is_dir() else {}
    dates = _bundle_dates()
    out: dict[str, tuple[CatalogSource, tuple[Offer, ...]]] = {}
    for name in sorted(set(bundled) | set(refreshed)):
        warning = None
        if name in refreshed:
            path = refreshed[name]
            sig = _signature(path)
            got = (_read_refreshed(name, str(path), sig, _signature(meta_path(path))) if sig is not None
                   else "it vanished while being read")
            if not isinstance(got, str):
                offers, meta = got
                out[name] = (CatalogSource(name, "refreshed", len(offers), str(meta["fetched_at"]),
                                           str(meta.get("source", "")), str(path)), offers)
                continue
            warning = f"{path}: {got}; using the bundled snapshot (`launchpad catalog refresh {name}` rewrites it)"
        if name in bundled:
            info = dates.get(name) or {}
            out[name] = (CatalogSource(name, "bundled", len(bundled[name]), str(info.get("as_of", "")),
                                       str(info.get("source", "")), str(config_path("catalog", f"{name}.csv")),
                                       warning), bundled[name])
        elif warning:  # no bundle to fall back to (e.g. runpod): no offers, and the reason
            out[name] = (CatalogSource(name, "none", 0, "", "", "", warning), ())
    return out


def catalog_sources(providers: Iterable[str] | None = None) -> dict[str, CatalogSource]:
    """Where each provider's catalog offers come from (all providers when `providers` is None)."""
    cur = _current()
    names = cur if providers is None else [p for p in providers if p in cur]
    return {p: cur[p][0] for p in names}


def catalog_providers() -> list[str]:
    """Provider names the catalog (bundled or refreshed) has offers for."""
    return [p for p, (_, offers) in _current().items() if offers]


def load_catalog(providers: Iterable[str] | None = None) -> dict[str, tuple[Offer, ...]]:
    """Catalog offers by provider (all providers when `providers` is None), refreshed or bundled. On-demand
    offers; each carries its spot price (None = no spot market) and the planner derives spot variants."""
    cat = {p: offers for p, (_, offers) in _current().items() if offers}
    if providers is None:
        return cat
    return {p: cat[p] for p in providers if p in cat}


def catalog_offers(provider: str) -> list[Offer]:
    """One provider's catalog offers: what a provider plugin's `offers()` can return when it has no live API."""
    got = _current().get(provider)
    return list(got[1]) if got else []
