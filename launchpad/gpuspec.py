"""GPU requirements in dstack's spec style: ``A100``, ``H100:80GB:8``, ``24GB..``, ``A100,H100:2..8``.

A spec is up to three ``:``-separated parts, in any order, each at most once:

- names: ``A100`` or ``A100,H100`` (case and separators ignored: ``rtx-4090`` == ``RTX4090``); SkyPilot's
  spellings are aliases: ``A100-80GB`` == ``A100:80GB``, ``A100-80GB-SXM``, ``H100-MEGA`` == ``H100``;
- memory per GPU: ``80GB``, ``24GB..`` (at least), ``..80GB`` (at most), ``24GB..80GB``;
- count: ``8``, ``2..8``, ``2..`` (at least 2). Without a count the spec asks for exactly one GPU.

Parsing checks the syntax only (hosts.yaml describes real hardware, whatever its name). Where a name is
what a user *asks for* (recipes, ``offers --gpu``), `check_gpu_names` refuses names nobody sells, with the
closest known names as the fix: an unknown name would otherwise reject every offer one by one.

Stdlib only: the planner and the recipe loader import this at start-up.
"""

from __future__ import annotations

import csv
import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import cast

__all__ = ["GpuSpec", "parse_gpu_spec", "canonical_gpu_name", "known_gpu_names", "check_gpu_names", "KNOWN_GPUS"]

_MEM = re.compile(r"^(?:(\d+(?:\.\d+)?)\s*GB)?(\.\.)?(?:(\d+(?:\.\d+)?)\s*GB)?$", re.IGNORECASE)
_COUNT = re.compile(r"^(\d+)?(\.\.)?(\d+)?$")
_NAME = re.compile(r"^[A-Z][A-Z0-9]{0,31}$")
# Words in a marketed GPU name that do not change which GPU it is (the planner's catalogs say
# "NVIDIA A100-SXM4-80GB" or "Tesla T4"; users write "A100" and "T4").
_NOISE = re.compile(r"^(NVIDIA|TESLA|GEFORCE|SXM\d*|PCIE|HBM\d*E?|\d+(\.\d+)?GB)$")
# Catalog / SkyPilot names that are the same GPU as the simpler name users type (after canonicalising).
_ALIASES = {"RTXA6000": "A6000", "RTXA5000": "A5000", "RTXA4000": "A4000", "H100MEGA": "H100"}
# A memory size inside a name, SkyPilot style: "A100-80GB", "V100-32GB", "A100-80GB-SXM", "A100-80G".
_NAME_MEM = re.compile(r"(?:^|[\s_\-])(\d+(?:\.\d+)?)\s*GB?(?=$|[\s_\-])", re.IGNORECASE)

# GPU names launchpad knows without reading a catalog: every GPU of configs/planner.yaml's table plus
# common ones no bundled catalog sells yet. `known_gpu_names` adds the catalog's names (a test keeps the
# planner table and this set in step).
KNOWN_GPUS = frozenset({
    "B300", "B200", "GB200", "GH200", "H200", "H100", "H100NVL", "H800", "H20", "A100", "A800", "A40", "A30",
    "A10", "A10G", "A16", "A2", "L40S", "L40", "L4", "L20", "RTXPRO6000", "RTXPRO6000WS", "RTX6000ADA",
    "RTX5880ADA", "RTX4000ADA", "A6000", "A5000", "A4500", "A4000", "RTX5090", "RTX5080", "RTX5070", "RTX4090",
    "RTX4080", "RTX4070", "RTX4060", "RTX3090", "RTX3080", "RTX3070", "RTX3060", "RTX2080TI", "RTX6000",
    "T4", "T4G", "V100", "P100", "P40", "P4000", "P4", "M60", "M4000", "K80", "K520",
    "MI300X", "MI250X", "MI25", "RADEONPROV520", "INFERENTIA", "INFERENTIA2", "TRAINIUM", "GAUDIHL205",
})


def canonical_gpu_name(name: str) -> str:
    """``"NVIDIA A100-SXM4-80GB"`` -> ``"A100"``, ``"rtx 4090"`` -> ``"RTX4090"``, ``"l40s"`` -> ``"L40S"``."""
    words = [w for w in re.split(r"[\s_\-]+", name.strip().upper()) if w]
    kept = [w for w in words if not _NOISE.match(w)]
    joined = "".join(kept or words)
    return _ALIASES.get(joined, joined)


@lru_cache(maxsize=1)
def _catalog_gpu_names() -> frozenset[str]:
    """The GPU names of the bundled catalog (its `Gpu` column); empty when there is no catalog."""
    try:
        from .config_dir import config_path

        folder = config_path("catalog")
    except Exception:  # no configs/ (e.g. on an instance): the static table still answers
        return frozenset()
    names: set[str] = set()
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as fh:
            rows = csv.reader(fh)
            header = next(rows, [])
            if "Gpu" not in header:
                continue
            col = header.index("Gpu")
            names.update(r[col] for r in rows if len(r) > col and r[col])
    return frozenset(names)


def known_gpu_names() -> frozenset[str]:
    """Every canonical GPU name launchpad knows: `KNOWN_GPUS` plus the bundled catalog's."""
    return KNOWN_GPUS | _catalog_gpu_names()


def check_gpu_names(spec: GpuSpec, text: str | None = None, known: Iterable[str] | None = None) -> None:
    """Raise ValueError (one line, with the closest known names as the fix) when `spec` names a GPU that
    is not in `known` (default `known_gpu_names()`)."""
    pool = frozenset(known) if known is not None else known_gpu_names()
    for name in spec.names:
        if name in pool:
            continue
        close = difflib.get_close_matches(name, sorted(pool), n=3, cutoff=0.65)  # below: unrelated names
        fix = (f"did you mean {' or '.join(close)}?" if close
               else "write e.g. A100, H100, L4, or 24GB.. for any GPU with 24 GB;")
        where = f" in {text!r}" if text and text.strip().upper() != name else ""
        raise ValueError(f"unknown GPU name {name!r}{where} ({fix} `launchpad offers` lists the GPUs on sale)")


def _num(value: float) -> str:
    """80.0 -> "80", 11.5 -> "11.5"."""
    return f"{value:g}"


@dataclass(frozen=True)
class GpuSpec:
    """What a job needs: any of `names` (empty = any GPU), memory per GPU in GB within
    [memory_min_gb, memory_max_gb] (None = unbounded) and between count_min and count_max GPUs
    (count_max None = no upper bound)."""

    names: tuple[str, ...] = ()
    memory_min_gb: float | None = None
    memory_max_gb: float | None = None
    count_min: int = 1
    count_max: int | None = 1

    def matches(self, gpu_name: str | None, gpu_memory_gb: float, gpu_count: int) -> bool:
        """Whether an offer of `gpu_count` x `gpu_name` with `gpu_memory_gb` each satisfies the spec.
        A CPU-only offer (gpu_name None or gpu_count 0) never does."""
        if not gpu_name or gpu_count < 1:
            return False
        if self.names and canonical_gpu_name(gpu_name) not in self.names:
            return False
        if self.memory_min_gb is not None and gpu_memory_gb < self.memory_min_gb:
            return False
        if self.memory_max_gb is not None and gpu_memory_gb > self.memory_max_gb:
            return False
        if gpu_count < self.count_min:
            return False
        return self.count_max is None or gpu_count <= self.count_max

    def __str__(self) -> str:
        """The canonical spec; ``parse_gpu_spec(str(s)) == s``."""
        parts = []
        if self.names:
            parts.append(",".join(self.names))
        lo, hi = self.memory_min_gb, self.memory_max_gb
        if lo is not None or hi is not None:
            if lo is not None and lo == hi:
                parts.append(f"{_num(lo)}GB")
            else:
                parts.append(
                    (f"{_num(lo)}GB" if lo is not None else "") + ".." + (f"{_num(hi)}GB" if hi is not None else "")
                )
        if self.count_min == self.count_max:
            if self.count_min != 1 or not parts:
                parts.append(str(self.count_min))
        else:
            parts.append(f"{self.count_min}.." + (str(self.count_max) if self.count_max is not None else ""))
        return ":".join(parts)


def _parse_memory(part: str) -> tuple[float | None, float | None] | None:
    """None when `part` is not a memory part at all."""
    if "GB" not in part.upper() or not (part[0].isdigit() or part.startswith("..")):
        return None
    m = _MEM.match(part)
    if not m:
        raise ValueError(f"cannot read GPU memory {part!r} (write e.g. 80GB, 24GB.. or 24GB..80GB)")
    lo, dots, hi = m.groups()
    lo_v = float(lo) if lo else None
    hi_v = float(hi) if hi else None
    if not dots:
        return lo_v, lo_v  # "80GB": exactly that much
    if lo_v is None and hi_v is None:
        raise ValueError(f"cannot read GPU memory {part!r} (write e.g. 24GB..80GB)")
    for v in (lo_v, hi_v):
        if v is not None and v <= 0:
            raise ValueError(f"GPU memory must be more than 0GB (got {part!r})")
    if lo_v is not None and hi_v is not None and lo_v > hi_v:
        raise ValueError(f"GPU memory range {part!r} is empty: the minimum is above the maximum")
    return lo_v, hi_v


def _parse_count(part: str) -> tuple[int, int | None] | None:
    """None when `part` is not a count part at all."""
    m = _COUNT.match(part)
    if not m or not (m.group(1) or m.group(3)):
        return None
    lo, dots, hi = m.groups()
    lo_v: int
    hi_v: int | None
    if not dots:
        lo_v = hi_v = int(lo)
    else:
        lo_v, hi_v = (int(lo) if lo else 1), (int(hi) if hi else None)
    if lo_v < 1 or (hi_v is not None and hi_v < 1):
        raise ValueError(f"GPU count must be at least 1 (got {part!r}; leave out `gpu` for a CPU-only job)")
    if hi_v is not None and lo_v > hi_v:
        raise ValueError(f"GPU count range {part!r} is empty: the minimum is above the maximum")
    return lo_v, hi_v


def _parse_names(part: str) -> tuple[tuple[str, ...], float | None]:
    """(names, memory per GPU written inside the names as SkyPilot does: ``A100-80GB`` -> 80.0, else None)."""
    names: list[str] = []
    sizes: set[float] = set()
    raws = part.split(",")
    for raw in raws:
        found = _NAME_MEM.findall(raw)
        sizes.update(float(f) for f in found)
        if len(found) > 1 or len(sizes) > 1:
            raise ValueError(f"GPU names {part!r} give different memory sizes (write e.g. A100:80GB)")
        if found:
            raw = _NAME_MEM.sub(" ", raw)
        elif sizes or any(_NAME_MEM.search(r) for r in raws):
            raise ValueError(f"GPU names {part!r} give a memory size for some names only (write e.g. A100,H100:80GB)")
        if re.search(r"\d\s*GB", raw, re.IGNORECASE):
            raise ValueError(f"write GPU memory as its own part, e.g. A100:80GB (got {part!r})")
        name = canonical_gpu_name(raw)
        if not _NAME.match(name):
            raise ValueError(
                f"cannot read {part!r} as GPU names, memory or count "
                "(write e.g. A100, A100,H100, 80GB or 8, joined by ':')"
            )
        if name not in names:
            names.append(name)
    return tuple(names), (sizes.pop() if sizes else None)


def parse_gpu_spec(text: str) -> GpuSpec:
    """Parse a dstack-style GPU spec. Raises ValueError with a one-line, human message."""
    if not isinstance(text, str):
        raise ValueError(f"GPU spec must be a string like 'A100:1' (got {type(text).__name__})")
    text = text.strip()
    if not text:
        raise ValueError("GPU spec is empty (write e.g. A100, H100:8 or 24GB..)")
    if len(text) > 200:
        raise ValueError("GPU spec is too long (write e.g. A100, H100:8 or 24GB..)")
    fields: dict[str, object] = {}
    value: object
    for part in text.split(":"):
        part = part.strip()
        if not part:
            raise ValueError(f"GPU spec {text!r} has an empty part (write e.g. H100:80GB:8)")
        memory = _parse_memory(part)
        count = _parse_count(part) if memory is None else None
        kind, value = (
            ("memory", memory) if memory is not None else ("count", count) if count is not None else ("names", None)
        )
        if kind == "names":
            value, in_name = _parse_names(part)
            if in_name is not None:  # "A100-80GB": the memory part comes with the name
                if "memory" in fields and fields["memory"] != (in_name, in_name):
                    raise ValueError(f"GPU spec {text!r} gives the memory twice (write e.g. A100:80GB)")
                fields["memory"] = (in_name, in_name)
        elif kind == "memory" and "memory" in fields and "names" in fields and fields["memory"] == value:
            continue  # "A100-80GB:80GB" says the same thing twice: harmless
        if kind in fields:
            raise ValueError(f"GPU spec {text!r} gives the {kind} twice (write e.g. H100:80GB:8)")
        fields[kind] = value
    mem_lo, mem_hi = cast("tuple[float | None, float | None]", fields.get("memory", (None, None)))
    count_lo, count_hi = cast("tuple[int, int | None]", fields.get("count", (1, 1)))
    return GpuSpec(
        names=cast("tuple[str, ...]", fields.get("names", ())),
        memory_min_gb=mem_lo,
        memory_max_gb=mem_hi,
        count_min=count_lo,
        count_max=count_hi,
    )
