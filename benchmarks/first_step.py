"""Time until training can start: pre-warm parts run in parallel vs one after another.

    python benchmarks/first_step.py [--store file|s3] [--dataset-mb 200] [--model-mb 400]

Parts: the dataset file and the model weights, both fetched from an object store onto local disk,
and the environment (a subprocess importing torch/transformers/peft/trl/datasets, as the agent does).
The baseline is the same three parts run serially in the same process; the figure of merit is
parallel / max(parts) (goal <= 1.1: the slowest part alone sets the pace). `--store s3` serves the
files from a moto server on 127.0.0.1 (moto is then the ceiling for the download parts).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from launchpad.agent.prewarm import prewarm  # noqa: E402

MiB = 1 << 20


def write_random(path: Path, mb: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for _ in range(mb):
            f.write(os.urandom(MiB))


def make_sources(root: Path, store: str, dataset_mb: int, model_mb: int) -> tuple[dict, Any]:
    src = root / "src"
    write_random(src / "data" / "train.jsonl", dataset_mb)
    write_random(src / "model" / "model.safetensors", model_mb)
    (src / "model" / "config.json").write_text("{}")
    if store == "file":
        return {"base_model": (src / "model").as_uri(),
                "datasets": [{"path": (src / "data" / "train.jsonl").as_uri(), "type": "chat"}]}, None
    import boto3
    from _moto import MotoServer

    server = MotoServer()
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="bench")
    for path in src.rglob("*"):
        if path.is_file():
            s3.upload_file(str(path), "bench", path.relative_to(src).as_posix())
    return {"base_model": "s3://bench/model", "datasets": [{"path": "s3://bench/data/train.jsonl", "type": "chat"}]}, server


def run(recipe: dict, root: Path, parallel: bool) -> tuple[float, dict]:
    dest = root / ("par" if parallel else "ser")
    shutil.rmtree(dest, ignore_errors=True)
    work = root / "work"
    work.mkdir(exist_ok=True)
    t0 = time.monotonic()
    out = prewarm(recipe, dest, work, parallel=parallel)
    return time.monotonic() - t0, out.parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", choices=["file", "s3"], default="file")
    ap.add_argument("--dataset-mb", type=int, default=200)
    ap.add_argument("--model-mb", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="lp-first-step-"))
    server = None
    try:
        recipe, server = make_sources(root, args.store, args.dataset_mb, args.model_mb)
        run(recipe, root, parallel=True)  # warm-up: page cache and .pyc for both measurements alike
        serial: list[float] = []
        parallel: list[float] = []
        parts: dict[str, dict[str, Any]] = {}
        for _ in range(args.repeat):
            t, one = run(recipe, root, parallel=False)  # serial: each part timed alone
            serial.append(t)
            for name, p in one.items():  # the fastest time each part managed alone
                if name not in parts or p["seconds"] < parts[name]["seconds"]:
                    parts[name] = p
            parallel.append(run(recipe, root, parallel=True)[0])
        slowest = max(p["seconds"] for p in parts.values())
        print(f"store: {args.store}; dataset {args.dataset_mb} MiB, weights {args.model_mb} MiB, "
              "env = import of the training stack")
        for name, p in parts.items():
            print(f"  part {name:<11} {p['seconds']:6.2f} s  ({p['total_bytes'] / MiB:,.0f} MiB)")
        print(f"serial (baseline): {min(serial):6.2f} s")
        print(f"parallel:          {min(parallel):6.2f} s")
        print(f"parallel / max(parts) = {min(parallel) / slowest:.2f}  (goal <= 1.10)")
        print(f"serial / parallel     = {min(serial) / min(parallel):.2f}x faster to the first step")
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
