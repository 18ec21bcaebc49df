"""Build launchpad's offer catalog snapshot from SkyPilot-format ``vms.csv`` files.

    python -m launchpad.planner.build_catalog ../shared/catalog configs/catalog

reads ``<src>/<cloud>/vms.csv`` for every cloud folder and writes one normalised, GPU-only CSV per cloud
(`COLUMNS`) plus ``PROVENANCE.md``. The traps of the source data are handled here, once:

- GCP lists GPUs as rows *without* an instance type that carry only the accelerator's price; the host VM
  (a2/a3/a4/g2, or an N1 VM for attachable GPUs) is its own row. We join them per zone: one offer per
  valid host shape = host + accelerators, price = host price + accelerator price (spot likewise, when both
  are known). Every valid shape is kept (g2-standard-4..32 for one L4, the N1 sizes within each GPU's
  limits): the planner takes the cheapest that meets the recipe's CPU and host-RAM need.
  TPUs are dropped (the trainer is CUDA).
- Vast's ``SpotPrice`` 0.00 means "no spot price", not free: it becomes empty (None).
- Vast rows named A100 may be 80 GB: per-GPU memory comes from ``GpuInfo`` (TotalGpuMemoryInMiB / count;
  Vast's MemoryInfo.SizeInMiB is the total, not per GPU), never from the name.
- Lambda's file is the other way round: its TotalGpuMemoryInMiB is one GPU's memory (40960 for 8x A100 40GB,
  the same as MemoryInfo.SizeInMiB), so for lambda the "total" is taken as per GPU.
- fluidstack's file has CRLF line endings (the csv module with ``newline=""`` reads both).
- CPU-only rows (about 85k of the ~90k, mostly Azure) and fractional GPUs (AWS g6f) are left out:
  CPU-only recipes run on the ``local`` provider. `read_source` can still yield them (``gpu_only=False``)
  for the benchmark.
"""

from __future__ import annotations

import ast
import csv
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from launchpad.gpuspec import canonical_gpu_name

COLUMNS = ("InstanceType", "Region", "Zone", "Gpu", "GpuCount", "GpuMemoryGB", "vCPUs", "MemoryGiB",
           "Price", "SpotPrice")

_NAME_MEM = re.compile(r"-(\d+)GB?$", re.IGNORECASE)  # "A100-80GB", "A100-80G", "V100-32GB"

# GCP: every host shape an accelerator count can be launched on (GCP's "GPU machine types" page,
# docs.cloud.google.com/compute/docs/gpus). Bundled families are fixed per count, except G2, where one L4
# comes on five shapes (4..32 vCPUs); the planner picks the cheapest host that meets the recipe's CPU and
# host-RAM need, so keeping every shape is what makes an L4 as cheap here as SkyPilot finds it.
_GCP_BUNDLED: dict[tuple[str, int], tuple[str, ...]] = {
    **{("A100", n): (f"a2-highgpu-{n}g",) for n in (1, 2, 4, 8)},
    ("A100", 16): ("a2-megagpu-16g",),
    **{("A100-80GB", n): (f"a2-ultragpu-{n}g",) for n in (1, 2, 4, 8)},
    **{("H100", n): (f"a3-highgpu-{n}g",) for n in (1, 2, 4, 8)},
    ("H100-MEGA", 8): ("a3-megagpu-8g",),
    ("H200", 8): ("a3-ultragpu-8g",),
    ("B200", 8): ("a4-highgpu-8g",),
    ("L4", 1): tuple(f"g2-standard-{v}" for v in (4, 8, 12, 16, 32)),
    ("L4", 2): ("g2-standard-24",), ("L4", 4): ("g2-standard-48",), ("L4", 8): ("g2-standard-96",),
}
# GCP GPUs attached to any predefined N1 VM (standard, highmem, highcpu) within the limits the same page
# gives per GPU count: (max vCPUs, max memory GB).
_GCP_N1_LIMITS: dict[str, dict[int, tuple[float, float]]] = {
    "T4": {1: (48, 312), 2: (48, 312), 4: (96, 624)},
    "P4": {1: (24, 156), 2: (48, 312), 4: (96, 624)},
    "V100": {1: (12, 78), 2: (24, 156), 4: (48, 312), 8: (96, 624)},
    "P100": {1: (16, 104), 2: (32, 208), 4: (96, 624)},
}
_N1_FAMILIES = ("n1-standard-", "n1-highmem-", "n1-highcpu-")


@dataclass(frozen=True)
class Row:
    """One normalised catalog offer (on-demand price and, when known, spot price)."""

    cloud: str
    instance_type: str
    region: str
    zone: str
    gpu: str  # canonical name; "" for CPU-only
    gpu_count: int
    gpu_memory_gb: float
    vcpus: float
    memory_gb: float
    price: float
    spot_price: float | None

    def as_csv(self) -> list[str]:
        return [self.instance_type, self.region, self.zone, self.gpu, str(self.gpu_count), _fmt(self.gpu_memory_gb),
                _fmt(self.vcpus), _fmt(self.memory_gb), _fmt(self.price),
                "" if self.spot_price is None else _fmt(self.spot_price)]


def _fmt(x: float) -> str:
    return f"{x:.6g}" if x != int(x) else str(int(x))


def _float(text: str | None) -> float | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


TOTAL_IS_PER_GPU = frozenset({"lambda"})  # see the module docstring


def gpu_name(raw: str) -> str:
    """Catalog accelerator name -> the canonical name the planner and `parse_gpu_spec` use."""
    return canonical_gpu_name(_NAME_MEM.sub("", raw.strip()))  # aliases (RTXA6000 -> A6000) included


def per_gpu_memory_gb(raw_name: str, gpu_info: str, count: float, default_gb: float, *,
                      total_is_per_gpu: bool = False) -> float:
    """Memory per GPU in GB: GpuInfo's total / count when it has one, else a size in the name, else default.
    `total_is_per_gpu`: the source writes one GPU's memory in the total field (Lambda's)."""
    info = (gpu_info or "").strip()
    if info.startswith("{"):
        try:
            data = ast.literal_eval(info)  # Python-literal dicts, as SkyPilot writes them
        except (ValueError, SyntaxError):
            data = {}
        total = data.get("TotalGpuMemoryInMiB")
        if total and count:
            return float(round(total / (1 if total_is_per_gpu else count) / 1024))
        gpus = data.get("Gpus") or []
        if gpus and (mib := (gpus[0].get("MemoryInfo") or {}).get("SizeInMiB")):
            return float(round(mib / 1024))
    if m := _NAME_MEM.search(raw_name.strip()):
        return float(m.group(1))
    return default_gb


def _gpu_defaults() -> dict[str, float]:
    from .settings import planner_settings

    return {name: float(g.get("memory_gb", 0)) for name, g in planner_settings()["gpus"].items()}


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:  # newline="": CRLF (fluidstack) reads like LF
        return list(csv.DictReader(f))


def _plain_rows(cloud: str, rows: Iterable[dict[str, str]], defaults: dict[str, float],
                gpu_only: bool) -> Iterator[Row]:
    for r in rows:
        raw = (r.get("AcceleratorName") or "").strip()
        count = _float(r.get("AcceleratorCount")) or 0.0
        price = _float(r.get("Price"))
        if price is None or not r.get("InstanceType"):
            continue
        if raw and count != int(count):
            continue  # fractional GPUs (AWS g6f): not a whole device to train on
        if not raw and gpu_only:
            continue
        spot = _float(r.get("SpotPrice"))
        if spot is not None and spot <= 0:
            spot = None  # Vast: 0.00 = no spot price, not free
        name = gpu_name(raw) if raw else ""
        mem = (per_gpu_memory_gb(raw, r.get("GpuInfo", ""), count, defaults.get(name, 0.0),
                                 total_is_per_gpu=cloud in TOTAL_IS_PER_GPU) if raw else 0.0)
        yield Row(cloud, r["InstanceType"].strip(), (r.get("Region") or "").strip(),
                  (r.get("AvailabilityZone") or "").strip(), name, int(count), mem,
                  _float(r.get("vCPUs")) or 0.0, _float(r.get("MemoryGiB")) or 0.0, price, spot)


def _gcp_host_types(raw: str, count: int, hosts_in_zone: dict[str, dict[str, str]]) -> list[str]:
    """Host VM types in one zone that can carry `count` x `raw` accelerators."""
    if (raw, count) in _GCP_BUNDLED:
        return [t for t in _GCP_BUNDLED[(raw, count)] if t in hosts_in_zone]
    limits = _GCP_N1_LIMITS.get(raw, {}).get(count)
    if limits is None:
        return []
    max_cpu, max_mem = limits
    return [t for t, h in hosts_in_zone.items() if t.startswith(_N1_FAMILIES)
            and (_float(h.get("vCPUs")) or 0) <= max_cpu and (_float(h.get("MemoryGiB")) or 0) <= max_mem]


def _gcp_rows(rows: list[dict[str, str]], defaults: dict[str, float], gpu_only: bool) -> Iterator[Row]:
    hosts: dict[str, dict[str, dict[str, str]]] = {}  # zone -> instance type -> row
    accels: list[dict[str, str]] = []
    for r in rows:
        if r.get("InstanceType"):
            hosts.setdefault(r["AvailabilityZone"], {})[r["InstanceType"]] = r
        elif r.get("AcceleratorName") and not r["AcceleratorName"].startswith("tpu"):
            accels.append(r)
    if not gpu_only:
        for zone_hosts in hosts.values():
            yield from _plain_rows("gcp", zone_hosts.values(), defaults, gpu_only)
    for a in accels:
        raw, count = a["AcceleratorName"], int(float(a["AcceleratorCount"]))
        zone_hosts = hosts.get(a["AvailabilityZone"], {})
        name = gpu_name(raw)
        mem = per_gpu_memory_gb(raw, a.get("GpuInfo", ""), count, defaults.get(name, 0.0))
        for host_type in _gcp_host_types(raw, count, zone_hosts):  # none in that zone: nothing to launch
            host = zone_hosts[host_type]
            price = (_float(host["Price"]) or 0.0) + (_float(a["Price"]) or 0.0)
            hs, as_ = _float(host.get("SpotPrice")), _float(a.get("SpotPrice"))
            spot = hs + as_ if hs is not None and as_ is not None else None
            yield Row("gcp", host_type, a["Region"], a["AvailabilityZone"], name, count, mem,
                      _float(host.get("vCPUs")) or 0.0, _float(host.get("MemoryGiB")) or 0.0, price, spot)


def read_source(src: Path, *, gpu_only: bool = True) -> dict[str, list[Row]]:
    """Every ``<src>/<cloud>/vms.csv`` -> normalised rows per cloud (sorted, so rebuilds diff cleanly)."""
    defaults = _gpu_defaults()
    out: dict[str, list[Row]] = {}
    for path in sorted(Path(src).glob("*/vms.csv")):
        cloud = path.parent.name
        rows = _read(path)
        it = _gcp_rows(rows, defaults, gpu_only) if cloud == "gcp" else _plain_rows(cloud, rows, defaults, gpu_only)
        out[cloud] = sorted(set(it), key=lambda r: (r.gpu, r.gpu_count, r.instance_type, r.region, r.zone, r.price))
    return out


def write_catalog(rows: dict[str, list[Row]], dest: Path, *, source_readme: Path | None = None) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for cloud, cloud_rows in rows.items():
        with (dest / f"{cloud}.csv").open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(COLUMNS)
            w.writerows(r.as_csv() for r in cloud_rows)
    lines = [
        "# Provenance of configs/catalog/",
        "",
        "Built by `python -m launchpad.planner.build_catalog <src> configs/catalog` from a snapshot of public",
        "catalogs in SkyPilot's `vms.csv` format (see the source README below). Normalised: GPU offers only,",
        "canonical GPU names, memory per GPU from GpuInfo, GCP accelerators joined to every valid host VM",
        "shape in their zone (g2-standard-4..32 for one L4, N1 sizes within each attachable GPU's vCPU/RAM",
        "limits; price = host + accelerators), Vast SpotPrice 0.00 -> empty (unknown), TPUs, fractional GPUs and",
        "CPU-only rows dropped. Prices are USD per instance-hour, from snapshots of 2026-01..05: realistic, not live.",
        "",
        "| file | offers |",
        "|---|---:|",
        *[f"| {c}.csv | {len(r)} |" for c, r in rows.items()],
        "",
    ]
    if source_readme and source_readme.is_file():
        lines += ["## Source README (verbatim)", "", source_readme.read_text(encoding="utf-8")]
    (dest / "PROVENANCE.md").write_text("\n".join(lines), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m launchpad.planner.build_catalog SRC_DIR DEST_DIR", file=sys.stderr)
        return 2
    src, dest = Path(argv[0]), Path(argv[1])
    rows = read_source(src)
    write_catalog(rows, dest, source_readme=src / "README.md")
    print(", ".join(f"{c}: {len(r)}" for c, r in rows.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
