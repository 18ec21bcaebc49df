"""Finding fast local disk for the pre-warm: instance-store NVMe if the machine has it.

`lsblk --json --bytes -o NAME,TYPE,SIZE,MODEL,TRAN,ROTA,MOUNTPOINT,FSTYPE` is parsed (recorded outputs of
real instance types are in tests/agent/data/). Order of preference:
  1. instance-store NVMe already mounted (reuse the mount);
  2. instance-store NVMe not mounted, and the provider allows it: format (ext4) and mount it;
  3. else the largest writable local filesystem among the candidates, with a warning for status.json.
Network block storage (EBS, persistent disks) that merely shows up as nvme is not "local NVMe".
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# NVMe devices that are network volumes (EBS, GCP persistent disk, Azure remote disks over NVMe), not
# local flash. Any other NVMe disk that is not the root disk counts as local: instance store
# ("Amazon EC2 NVMe Instance Storage", GCP "nvme_card", Azure "Microsoft NVMe Direct Disk") or the
# vendor SSDs of bare-metal and GPU-cloud machines.
_NETWORK_MODELS = ("Amazon Elastic Block Store", "nvme_card-pd", "PersistentDisk", "MSFT NVMe Accelerator")
DEFAULT_MOUNT = "/mnt/launchpad-nvme"


@dataclass(frozen=True)
class Disk:
    name: str
    size_bytes: int
    model: str
    mountpoint: str | None
    fstype: str | None


@dataclass(frozen=True)
class DataDir:
    path: Path
    kind: str  # "nvme" | "nvme-new-mount" | "fallback"
    warning: str | None = None
    device: str | None = None


def parse_lsblk(text: str) -> list[Disk]:
    """Instance-store NVMe disks (whole disks, or their single partition) from lsblk's JSON."""
    doc = json.loads(text)
    out = []
    for dev in doc.get("blockdevices", []):
        if dev.get("type") != "disk" or not str(dev.get("name", "")).startswith("nvme"):
            continue
        model = (dev.get("model") or "").strip()
        if any(model.startswith(m) for m in _NETWORK_MODELS):
            continue
        children = dev.get("children") or []
        if any(_mounted(c) in ("/", "/boot", "/boot/efi") for c in children) or _mounted(dev) == "/":
            continue  # the root disk
        mount = _mounted(dev) or next((_mounted(c) for c in children if _mounted(c)), None)
        out.append(Disk(name=dev["name"], size_bytes=int(dev.get("size") or 0), model=model, mountpoint=mount,
                        fstype=dev.get("fstype")))
    return out


def _mounted(dev: dict) -> str | None:
    mp = dev.get("mountpoint")
    if mp is None and isinstance(dev.get("mountpoints"), list):
        mp = next((m for m in dev["mountpoints"] if m), None)
    return mp


def read_lsblk() -> str | None:
    if shutil.which("lsblk") is None:
        return None
    try:
        return subprocess.run(["lsblk", "--json", "--bytes", "-o", "NAME,TYPE,SIZE,MODEL,TRAN,ROTA,MOUNTPOINT,FSTYPE"],
                              capture_output=True, text=True, timeout=10, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None


def choose_data_dir(candidates: list[Path], *, lsblk_json: str | None = None, allow_mount: bool = False,
                    mount_at: str = DEFAULT_MOUNT, expect_nvme: bool = True) -> DataDir:
    """Where pre-warmed data goes. `candidates` are fallbacks (e.g. the workdir, /mnt, /tmp).
    `expect_nvme` False (e.g. the local provider) makes the fallback normal rather than a warning."""
    chosen = _choose(candidates, lsblk_json, allow_mount, mount_at)
    if not expect_nvme and chosen.kind == "fallback":
        return DataDir(chosen.path, chosen.kind)
    return chosen


def _choose(candidates: list[Path], lsblk_json: str | None, allow_mount: bool, mount_at: str) -> DataDir:
    disks = parse_lsblk(lsblk_json) if lsblk_json else []
    mounted = [d for d in disks if d.mountpoint and _writable(Path(d.mountpoint))]
    if mounted:
        best = max(mounted, key=lambda d: d.size_bytes)
        assert best.mountpoint is not None  # filtered above
        return DataDir(Path(best.mountpoint), "nvme", device=best.name)
    unmounted = [d for d in disks if not d.mountpoint]
    if unmounted and allow_mount:
        best = max(unmounted, key=lambda d: d.size_bytes)
        try:
            mount_nvme(f"/dev/{best.name}", mount_at, format_first=best.fstype is None)
            return DataDir(Path(mount_at), "nvme-new-mount", device=best.name)
        except (subprocess.SubprocessError, OSError) as e:
            warning = f"could not mount local NVMe /dev/{best.name} ({e}); using the largest local disk instead"
            return _fallback(candidates, warning)
    if unmounted:
        return _fallback(candidates, f"local NVMe /dev/{unmounted[0].name} is not mounted and this provider may not "
                                     "format disks; using the largest local disk instead")
    return _fallback(candidates, "no local NVMe on this machine; pre-warming to the largest local disk")


def mount_nvme(device: str, mountpoint: str, *, format_first: bool) -> None:
    if format_first:
        subprocess.run(["mkfs.ext4", "-q", "-F", "-E", "nodiscard", device], check=True, timeout=600)
    os.makedirs(mountpoint, exist_ok=True)
    subprocess.run(["mount", "-o", "noatime", device, mountpoint], check=True, timeout=60)


def _fallback(candidates: list[Path], warning: str) -> DataDir:
    usable = [c for c in candidates if _writable(c)]
    if not usable:
        raise OSError("no writable local directory for pre-warmed data")
    best = max(usable, key=lambda p: shutil.disk_usage(p).free)
    return DataDir(best, "fallback", warning=warning)


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK)
