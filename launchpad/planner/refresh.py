"""`launchpad catalog refresh`: current offers from gpuhunt (dstack's GPU catalog library), written where the
planner reads them (`catalog.refreshed_dir()`: ``<provider>.csv`` in the bundle's columns + ``.meta.json``).

Two gpuhunt sources per provider (`SOURCES`):

- ``published``: the catalog dstack collects with gpuhunt's offline providers and publishes
  (aws, azure, gcp, lambdalabs, runpod). No cloud account needed. gpuhunt's documented inputs apply:
  ``GPUHUNT_CATALOG_URL`` (a mirror of the bucket) and ``GPUHUNT_CATALOG_DIR`` (local ``<name>.csv`` files,
  e.g. written by ``python -m gpuhunt lambdalabs --output lambdalabs.csv``).
- ``live``: gpuhunt's provider class asks the provider's own API now: vastai (public bundles search),
  runpod (public GraphQL), lambdalabs (needs a Lambda API key). aws, gcp and azure have no live source here:
  gpuhunt collects them with a cloud account (and AWS's multi-GB price list), which is what dstack publishes.

``auto`` (the default) takes ``published`` where dstack publishes the provider, else ``live``. A provider that
cannot run (no key) is skipped with one line saying why; one that fails is reported and the others are still
written. Files are replaced atomically (temp file + rename), the CSV before its meta; the planner checks the
meta's row count, so a half-pair is never taken for a catalog. gpuhunt is imported here only, lazily.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import BadInput, ConfigError
from .build_catalog import COLUMNS, Row, gpu_name

# launchpad provider name -> gpuhunt provider name
GPUHUNT_NAMES = {"aws": "aws", "azure": "azure", "gcp": "gcp", "lambda": "lambdalabs", "runpod": "runpod",
                 "vast": "vastai"}
SOURCES = {"aws": ("published",), "azure": ("published",), "gcp": ("published",),
           "lambda": ("published", "live"), "runpod": ("published", "live"), "vast": ("live",)}
# gpuhunt flags for offers launchpad cannot rent as one instance: RunPod's multi-node clusters and CPU pods,
# GCP's calendar-mode reservations, and the duplicate g4 rows gpuhunt keeps for an old dstack.
DROP_FLAGS = frozenset({"runpod-cluster", "runpod-cpu", "gcp-dws-calendar-mode", "gcp-g4-preview"})
INSTALL_HINT = "pip install 'launchpad[catalog]' (or: pip install gpuhunt)"
LAMBDA_KEY_ENV = "LAMBDA_API_KEY"
_DOWNLOAD_TIMEOUT_S = 60.0


@dataclass
class Outcome:
    """What refreshing one provider did: status "written", "skipped" (could not run: detail says why) or
    "failed" (ran and failed: detail says how; its previous file, if any, is left as it was)."""

    provider: str
    status: str
    source: str = ""  # "published" / "live"
    rows: int = 0
    detail: str = ""
    path: str | None = None
    fetched_at: str | None = None
    seconds: float = 0.0
    dropped: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "status": self.status, "source": self.source, "rows": self.rows,
                "detail": self.detail, "path": self.path, "fetched_at": self.fetched_at,
                "seconds": round(self.seconds, 2), "dropped": self.dropped}


class _Skip(Exception):
    """This provider cannot be fetched here (no key, no live source): skipped, not failed."""


def resolve_providers(names: Sequence[str]) -> list[str]:
    """Launchpad provider names (gpuhunt's spellings too: lambdalabs, vastai); none = every covered one.
    Raises `BadInput` naming the unknown ones and the known list, before anything is fetched."""
    if not names:
        return sorted(GPUHUNT_NAMES)
    alias = {g: p for p, g in GPUHUNT_NAMES.items()}
    out, unknown = [], []
    for n in names:
        p = n.strip().lower()
        p = alias.get(p, p)
        if p not in GPUHUNT_NAMES:
            unknown.append(n)
        elif p not in out:
            out.append(p)
    if unknown:
        from .catalog import catalog_providers

        bundle_only = sorted(set(catalog_providers()) - set(GPUHUNT_NAMES))
        extra = f"; {', '.join(bundle_only)} come from the bundled snapshot only" if bundle_only else ""
        raise BadInput(f"catalog refresh: unknown provider {', '.join(map(repr, unknown))}: gpuhunt covers "
                       f"{', '.join(sorted(GPUHUNT_NAMES))}{extra}")
    return out


def gpuhunt() -> Any:
    """The gpuhunt module, or `ConfigError` with the install hint (it is an optional dependency)."""
    try:
        return importlib.import_module("gpuhunt")
    except ImportError:
        raise ConfigError("catalog refresh needs gpuhunt, which is not installed", hint=INSTALL_HINT) from None


def _version() -> str:
    return str(getattr(importlib.import_module("gpuhunt.version"), "__version__", "?"))


def lambda_key() -> str | None:
    """The Lambda API key: $LAMBDA_API_KEY, else config.yaml's providers.lambda.api_key. Never logged."""
    if key := os.environ.get(LAMBDA_KEY_ENV):
        return key
    from ..settings import load_user_config

    section = (load_user_config().get("providers") or {}).get("lambda") or {}
    key = section.get("api_key") if isinstance(section, dict) else None
    return str(key) if key else None


# -- gpuhunt's items -> catalog rows -----------------------------------------------------------------------
def _where(provider: str, location: str) -> tuple[str, str]:
    """gpuhunt has one `location`: a zone on GCP (region = zone less its letter), a region elsewhere."""
    location = (location or "").strip()
    if provider == "gcp" and location.count("-") >= 2:
        return location.rsplit("-", 1)[0], location
    return location, ""


def _vast_type(it: Any) -> str:
    """A Vast offer as the bundled snapshot names it (SkyPilot's ``1x-RTX_4090-32-65536``: count, Vast's GPU
    name, vCPUs, RAM in MB), not gpuhunt's offer id: an ask id is gone within hours, and launchpad-vast
    searches by the GPU name and count in it. gpuhunt has renamed the GPU (RTX 4090 -> RTX4090); its own
    mapping gives Vast's name back where it is one name (A100 is two: PCIE and SXM4, so it stays A100)."""
    back = importlib.import_module("gpuhunt.providers.vastai").get_vastai_gpu_names(it.gpu_name)
    name = back[0] if len(back) == 1 else it.gpu_name
    return f"{it.gpu_count}x-{name.replace(' ', '_')}-{int(it.cpu)}-{round(float(it.memory) * 1000)}"


def rows_from_items(provider: str, items: Iterable[Any]) -> tuple[list[Row], dict[str, int]]:
    """gpuhunt `CatalogItem`s -> one row per (type, place, GPU) with its on-demand price and, from the spot
    item, the spot price; canonical GPU names (build_catalog.gpu_name). Returns the rows and what was
    dropped, by reason: CPU-only, TPUs (the trainer is CUDA), flagged offers (`DROP_FLAGS`), spot-only."""
    from .settings import planner_settings

    defaults = {n: float(g.get("memory_gb", 0)) for n, g in planner_settings()["gpus"].items()}
    dropped: Counter[str] = Counter()
    merged: dict[tuple, dict[str, Any]] = {}
    for it in items:
        vendor = getattr(it.gpu_vendor, "value", it.gpu_vendor)
        flags = set(it.flags or ()) & DROP_FLAGS
        if not it.gpu_count or not it.gpu_name:
            dropped["cpu-only"] += 1
        elif vendor == "google":
            dropped["tpu"] += 1
        elif flags:
            dropped[sorted(flags)[0]] += 1
        elif not it.price or it.price <= 0:
            dropped["no price"] += 1
        else:
            name = gpu_name(it.gpu_name)
            region, zone = _where(provider, it.location)
            itype = _vast_type(it) if provider == "vast" else str(it.instance_name)
            key = (itype, region, zone, name, int(it.gpu_count))  # one row per shape and place: the cheapest
            m = merged.setdefault(key, {"price": None, "spot": None, "item": it})
            slot = "spot" if it.spot else "price"
            m[slot] = float(it.price) if m[slot] is None else min(m[slot], float(it.price))
    rows = []
    for (itype, region, zone, name, count), m in merged.items():
        if m["price"] is None:
            dropped["spot only"] += 1  # the planner prices on-demand and derives spot from it
            continue
        it = m["item"]
        mem = float(it.gpu_memory) if it.gpu_memory else defaults.get(name, 0.0)
        rows.append(Row(provider, itype, region, zone, name, count, mem, float(it.cpu or 0), float(it.memory or 0),
                        round(m["price"], 6), None if m["spot"] is None else round(m["spot"], 6)))
    rows.sort(key=lambda r: (r.gpu, r.gpu_count, r.instance_type, r.region, r.zone, r.price))
    return rows, dict(dropped)


# -- writing ----------------------------------------------------------------------------------------------
def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_refreshed(provider: str, rows: Sequence[Row], meta: dict[str, Any], folder: Path | None = None) -> Path:
    """Replace ``<folder>/<provider>.csv`` and its ``.meta.json`` (``rows`` and ``columns`` filled in)."""
    import csv
    import io

    from ..settings import make_private
    from .catalog import meta_path, refreshed_dir

    folder = folder or refreshed_dir()
    make_private(folder)  # the home's convention (0700 dirs); prices are not secret, the home's other files are
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    w.writerows(r.as_csv() for r in rows)
    path = folder / f"{provider}.csv"
    _atomic_write(path, buf.getvalue())
    _atomic_write(meta_path(path), json.dumps({**meta, "rows": len(rows), "columns": list(COLUMNS)}, indent=2) + "\n")
    return path


# -- fetching ---------------------------------------------------------------------------------------------
class _LogTap(logging.Handler):
    """Collects gpuhunt's log records during a refresh: its download failures are logged, not raised, and
    must not reach the terminal as tracebacks. `errors(name)` gives the ones that mention a provider."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def errors(self, name: str) -> list[str]:
        out = []
        for r in self.records:
            if r.levelno >= logging.ERROR and name in (r.args or ()):
                exc = r.exc_info[1] if r.exc_info else None
                out.append(f"{r.getMessage()}{f': {exc}' if exc else ''}")
        return out


class _Published:
    """dstack's published catalogs, loaded once for every provider of one refresh (gpuhunt loads them all)."""

    def __init__(self, gh: Any, tap: _LogTap) -> None:
        self.gh, self.tap = gh, tap
        self.local = os.environ.get("GPUHUNT_CATALOG_DIR")
        self.catalog = gh.Catalog(balance_resources=False, auto_reload=False)
        self._lock = threading.Lock()
        self._loaded: Exception | None | bool = False

    def items(self, gname: str) -> tuple[list[Any], str]:
        if self.local:  # gpuhunt reads <dir>/<name>.csv itself in query()
            if not (Path(self.local) / f"{gname}.csv").is_file():
                raise RuntimeError(f"GPUHUNT_CATALOG_DIR={self.local} has no {gname}.csv")
            return self.catalog.query(provider=gname, min_gpu_count=1), f"{self.local}/{gname}.csv (GPUHUNT_CATALOG_DIR)"
        with self._lock:
            if self._loaded is False:
                try:
                    self.catalog.load()
                    self._loaded = None
                except Exception as exc:  # GPUHuntError (every download failed) or the URL itself
                    self._loaded = exc
        if isinstance(self._loaded, Exception):
            raise RuntimeError(f"cannot download dstack's published catalogs: {_cause(self._loaded)}")
        got = self.catalog.catalog.get(gname)
        if got is None:
            why = self.tap.errors(gname)
            raise RuntimeError(why[-1] if why else f"dstack's published catalogs have no {gname}")
        base = os.environ.get("GPUHUNT_CATALOG_URL")
        where = f" from {base}" if base else ""
        return self.catalog.query(provider=gname, min_gpu_count=1), f"dstack's published {gname} catalog {got.version}{where}"


def _cause(exc: BaseException) -> str:
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return str(exc) or type(exc).__name__


def _live_items(provider: str, gh: Any) -> tuple[list[Any], str]:
    if provider == "vast":
        from .disk import disk_settings

        # gpuhunt prices a Vast offer with the disk it is rented with: min_disk_size or else the host's whole
        # disk. The planner's smallest root volume is that disk (providers.yaml adds no disk price for
        # vast), and a host with less can never take one, so it is left out.
        want = gh.QueryFilter(min_gpu_count=1, min_disk_size=int(disk_settings()["min_gb"]))
        items = importlib.import_module("gpuhunt.providers.vastai").VastAIProvider.from_env().get(query_filter=want)
    elif provider == "runpod":
        cls = importlib.import_module("gpuhunt.providers.runpod").RunpodProvider
        items = cls.filter(cls().get())
    elif provider == "lambda":
        key = lambda_key()
        if not key:
            raise _Skip(f"--source live needs a Lambda API key (${LAMBDA_KEY_ENV} or providers.lambda.api_key in "
                        "config.yaml); --source published needs none")
        items = importlib.import_module("gpuhunt.providers.lambdalabs").LambdaLabsProvider(key).get()
    else:
        raise _Skip(f"no live source: gpuhunt collects {provider} with a cloud account (dstack publishes the "
                    "result), use --source published")
    return list(items), f"{GPUHUNT_NAMES[provider]} API, live"


def _redact(text: str) -> str:
    """An error's text without the one secret a refresh holds (requests' errors carry URLs, not headers; this
    is for whatever else may echo it)."""
    try:
        key = lambda_key()
    except Exception:  # an unreadable config.yaml: nothing of it can be in the text either
        return text
    return text.replace(key, "***") if key else text


def refresh(providers: Sequence[str], source: str = "auto", *,
            on_start: Callable[[str, str], None] | None = None,
            on_done: Callable[[Outcome], None] | None = None, folder: Path | None = None) -> list[Outcome]:
    """Fetch and write each provider's catalog (in parallel); `providers` as `resolve_providers` returns them.
    `on_start(provider, source)` / `on_done(outcome)` drive the CLI's progress. Raises `ConfigError` when
    gpuhunt is missing, `BadInput` for an unknown `source`; a provider's failure is its Outcome."""
    if source not in ("auto", "live", "published"):
        raise BadInput(f"--source must be auto, live or published (got {source!r})")
    gh = gpuhunt()
    version = _version()
    tap = _LogTap()
    log = logging.getLogger("gpuhunt")
    saved = (log.propagate, log.level)
    log.addHandler(tap)
    log.propagate = False
    log.setLevel(logging.WARNING)
    published = _Published(gh, tap)
    old_timeout = socket.getdefaulttimeout()
    # gpuhunt downloads the published catalogs with urllib and no timeout: a stalled server would hang here
    socket.setdefaulttimeout(_DOWNLOAD_TIMEOUT_S)

    def one(provider: str) -> Outcome:
        how = source if source != "auto" else SOURCES[provider][0]
        if on_start:
            on_start(provider, how)
        t0 = time.monotonic()
        try:
            if how == "published" and "published" not in SOURCES[provider]:
                raise _Skip(f"dstack publishes no {GPUHUNT_NAMES[provider]} catalog; use --source live")
            items, origin = published.items(GPUHUNT_NAMES[provider]) if how == "published" else _live_items(provider, gh)
            rows, dropped = rows_from_items(provider, items)
            if not rows:
                raise RuntimeError(f"gpuhunt returned no GPU offers ({sum(dropped.values())} dropped: {dropped or 'none'})")
            fetched = datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
            path = write_refreshed(provider, rows, {
                "provider": provider, "fetched_at": fetched, "source": f"gpuhunt {version}: {origin}",
                "gpuhunt_provider": GPUHUNT_NAMES[provider], "method": how, "dropped": dropped}, folder)
            out = Outcome(provider, "written", how, len(rows), origin, str(path), fetched, dropped=dropped)
        except _Skip as exc:
            out = Outcome(provider, "skipped", how, detail=str(exc))
        except Exception as exc:  # any provider's trouble (HTTP, parsing, disk) is its own outcome
            out = Outcome(provider, "failed", how, detail=_redact(f"{type(exc).__name__}: {_cause(exc)}")[:300])
        out.seconds = time.monotonic() - t0
        if on_done:
            on_done(out)
        return out

    try:
        with ThreadPoolExecutor(max_workers=max(1, min(6, len(providers)))) as pool:
            outcomes = list(pool.map(one, providers))
    finally:
        socket.setdefaulttimeout(old_timeout)
        log.removeHandler(tap)
        log.propagate = saved[0]
        log.setLevel(saved[1])  # setLevel, not .level =: it clears the loggers' cached levels
    return outcomes
