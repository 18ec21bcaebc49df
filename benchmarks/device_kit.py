"""What a lent GPU machine needs beyond its image to run launchpad's GPU checks (benchmarks/gpu_checks.sh),
as wheels in one folder that the device tool carries.

    python benchmarks/device_kit.py                        # wheels for the GPU image (CPython 3.12) into .whl/
    python benchmarks/device_kit.py --python 3.11 --dest /tmp/kit311 --image-venv /tmp/img  # a CPU rehearsal

The lent machine reaches no package index, and its image holds torch, numpy, pandas, pyarrow and an older
transformers stack, but neither bitsandbytes, TRL, datasets nor pydantic. This resolves launchpad's own
requirements and its training stack, pinned to the versions installed where this runs (the versions CI
tests), for the image's Python and platform, with torch stood in for by a metadata-only wheel (its CUDA
wheels are the image's and are never fetched). The closure minus what the image keeps (torch, numpy,
pandas, pyarrow: large, and there) is downloaded. bitsandbytes ships a CUDA library per CUDA release
(~40 MB); the kit keeps the CPU one and those of `--bnb-cuda` (the image's torch is built for CUDA 13).

`gpu_checks.sh` installs the kit with `pip install --no-index --find-links .whl`: pip takes each package
from the image where the installed version satisfies the pins, from the kit otherwise. `--image-venv`
also rehearses that here: it installs the kit into that venv the same way (a venv made to look like the
image: torch and the packages the image has), so a package missing from the kit fails here, not on
a machine whose minutes are counted.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: the training stack (pyproject's [train] extra, less DeepSpeed: a source build, and no check needs it;
#: less tensorboard: the image has it)
TRAIN = ("transformers", "peft", "trl", "accelerate", "datasets", "tokenizers", "safetensors", "huggingface_hub",
         "bitsandbytes")
#: on the image already, large: never carried (torch's version is the image's; the others satisfy the pins)
ON_IMAGE = {"torch", "numpy", "pandas", "pyarrow"}
IMAGE_TORCH = "2.11.0"  # /work/.library/device/KINDS.md: torch 2.11.0+cu130 on both kinds
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")
LIMIT_MIB = 48  # the device tool carries 64 MiB in all, the repository's own files included


def requirements() -> list[str]:
    """launchpad's runtime requirements and the training stack, each pinned to the installed version."""
    core = [r for r in metadata.requires("launchpad") or [] if "extra ==" not in r]  # pyproject's dependencies
    names = [re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0] for r in core] + list(TRAIN)
    return [f"{n}=={metadata.version(n)}" for n in dict.fromkeys(names)]


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def torch_stub(folder: Path, version: str) -> Path:
    """A wheel with torch's name and a local version and no files: it satisfies every `torch>=` of the
    closure so that pip never fetches the CUDA wheels."""
    info = f"torch-{version}.dist-info"
    files = {f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: launchpad-device-kit\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    path = folder / f"torch-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{info}/RECORD", "\n".join([*(_record_line(n, d) for n, d in files.items()), f"{info}/RECORD,,"]) + "\n")
    return path


def _platform_args(python: str) -> list[str]:
    return ["--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            *(a for p in PLATFORMS for a in ("--platform", p))]


def closure(pins: list[str], python: str) -> list[tuple[str, str]]:
    """(name, version) of everything pip would install for `pins` on that Python, torch excepted."""
    with tempfile.TemporaryDirectory() as tmp:
        stub = f"{IMAGE_TORCH}+kitstub"
        torch_stub(Path(tmp), stub)
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                        "--report", str(report), "--find-links", tmp, *_platform_args(python),
                        "--target", str(Path(tmp) / "target"), *pins, f"torch=={stub}"], check=True)
        found = json.loads(report.read_text())["install"]
    return [(i["metadata"]["name"], i["metadata"]["version"]) for i in found]


def slim_bitsandbytes(wheel: Path, cuda: tuple[str, ...]) -> None:
    """Rewrite the wheel without the native libraries of other CUDA releases, ROCm and XPU (RECORD too)."""
    keep = re.compile(r"libbitsandbytes_(cpu|" + "|".join(f"cuda{c}" for c in cuda) + r")\.so$")
    src = zipfile.ZipFile(wheel)
    out = io.BytesIO()
    with src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        dropped = {n for n in src.namelist() if n.endswith(".so") and "libbitsandbytes_" in n and not keep.search(n)}
        for item in src.infolist():
            if item.filename in dropped:
                continue
            data = src.read(item)
            if item.filename.endswith(".dist-info/RECORD"):
                rows = [r for r in csv.reader(io.StringIO(data.decode())) if r and r[0] not in dropped]
                text = io.StringIO()
                csv.writer(text, lineterminator="\n").writerows(rows)
                data = text.getvalue().encode()
            dst.writestr(item, data)
    wheel.write_bytes(out.getvalue())


def build(dest: Path, python: str, bnb_cuda: tuple[str, ...]) -> list[str]:
    """Download the kit into `dest` (emptied of wheels first); returns the pins `gpu_checks.sh` installs."""
    pins = requirements()
    wanted = [(n, v) for n, v in closure(pins, python) if n.lower().replace("_", "-") not in ON_IMAGE]
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.whl"):
        old.unlink()
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *_platform_args(python),
                    "-d", str(dest), *(f"{n}=={v}" for n, v in wanted)], check=True)
    for wheel in dest.glob("bitsandbytes-*.whl"):
        slim_bitsandbytes(wheel, bnb_cuda)
    (dest / "pins.txt").write_text("\n".join(pins) + "\n")
    return pins


def rehearse(dest: Path, venv: Path) -> None:
    """Install the kit into `venv` as gpu_checks.sh does on the device (no index: the kit or nothing)."""
    python = venv / "bin" / "python"
    pins = (dest / "pins.txt").read_text().split()
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-index", "--find-links", str(dest), *pins],
                   check=True)
    subprocess.run([str(python), "-m", "pip", "check"], check=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", type=Path, default=REPO / ".whl", help="the kit's folder (default .whl, git-ignored)")
    ap.add_argument("--python", default="3.12", help="the device image's Python (3.12)")
    ap.add_argument("--bnb-cuda", default="130,132", help="bitsandbytes' CUDA libraries to keep (torch.version.cuda)")
    ap.add_argument("--image-venv", type=Path, default=None, help="rehearse the install into this venv")
    args = ap.parse_args()
    pins = build(args.dest, args.python, tuple(args.bnb_cuda.split(",")))
    wheels = sorted(args.dest.glob("*.whl"), key=lambda p: -p.stat().st_size)
    total = sum(p.stat().st_size for p in wheels) / 2**20
    print(f"{len(wheels)} wheels, {total:.1f} MiB in {args.dest} (largest: "
          + ", ".join(f"{p.name.split('-')[0]} {p.stat().st_size / 2**20:.1f}" for p in wheels[:4]) + ")")
    print("pins: " + " ".join(pins))
    if args.image_venv:
        rehearse(args.dest, args.image_venv)
        print(f"installed into {args.image_venv} from the kit alone")
    if total > LIMIT_MIB:
        print(f"the kit is {total:.1f} MiB, over {LIMIT_MIB} MiB: the device tool carries 64 MiB in all", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
