"""Pre-warm: put the dataset and the model weights on local disk before training, while the Python
environment warms up, all three at once. Training then reads local disk only.

Parts (each runs in its own thread; store downloads are themselves parallel):
  - every dataset given as a store URI (s3:// gs:// az:// file://) -> <data dir>/datasets/<n>/<file>
  - a base model given as a store URI -> <data dir>/models/<hash>/ ; an HF id -> huggingface_hub snapshot
  - "env": imports the training stack in a subprocess (and records versions when the env check exists)
Local paths are already on local disk and are used in place. Downloads are resumable: complete files
are skipped, so a restarted agent continues where it stopped.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from ..storage import open_store, scheme_of
from ..storage.local import local_path

_DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".txt", ".arrow")
STORE_SCHEMES = ("s3", "gs", "az", "file")


@dataclass
class Part:
    name: str
    run: Callable[[Part], Any]
    total: int = 0
    done: int = 0
    seconds: float = 0.0
    error: str | None = None
    result: Any = None


@dataclass
class PrewarmResult:
    recipe: dict[str, Any]  # the recipe with local paths in place of URIs
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0


def is_uri(value: str) -> bool:
    return "://" in value and scheme_of(value) in STORE_SCHEMES


def _download_file(uri: str, dest_dir: Path, part: Part) -> Path:
    parent, _, key = uri.rstrip("/").rpartition("/")
    store = open_store(parent)
    dest = local_path(dest_dir, key, source=uri)
    objs = [o for o in store.list(key) if o.key == key]
    if not objs:
        raise FileNotFoundError(f"{uri} does not exist")
    part.total = objs[0].size
    if dest.exists() and dest.stat().st_size == part.total:  # resumable: already here
        part.done = part.total
        return dest
    store.get_file(key, dest)
    part.done = part.total
    return dest


def _download_tree(uri: str, dest: Path, part: Part) -> Path:
    store = open_store(uri)
    from ..storage.transfer import download_tree

    objs = store.list("")
    if not objs:
        raise FileNotFoundError(f"{uri}: nothing there")
    part.total = sum(o.size for o in objs)
    def progress(done: int, total: int) -> None:
        part.done, part.total = done, total

    download_tree(store, "", dest, progress=progress)
    part.done = part.total
    return dest


def _hf_snapshot(repo_id: str, dest: Path, part: Part) -> Path:
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo_id=repo_id, local_dir=str(dest), max_workers=16))


def _warm_env(workdir: Path, part: Part) -> dict[str, Any]:
    """Import the training stack once (pages it in, compiles .pyc), record versions, and fail fast when
    the recipe cannot run here (CUDA too old for the attention asked for, bitsandbytes missing, ...)."""
    if importlib.util.find_spec("launchpad.train.envcheck") is not None:
        cmd = [sys.executable, "-m", "launchpad.train.envcheck", "--out", str(workdir / "env.json")]
        if (workdir / "job.json").exists():
            cmd += ["--spec", str(workdir / "job.json")]
    else:
        cmd = [sys.executable, "-c", "import torch, transformers, peft, trl, datasets"]
    # Lower priority: the downloads are the critical path; the imports fill whatever CPU they leave.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, preexec_fn=lambda: os.nice(10))
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise RuntimeError(lines[-1] if lines else f"environment check exited {proc.returncode}")
    try:
        return json.loads((workdir / "env.json").read_text())
    except (OSError, ValueError):
        return {}


def plan_parts(recipe: dict[str, Any], data_dir: Path, workdir: Path, *, warm_env: bool = True) -> list[Part]:
    parts: list[Part] = []
    for n, ds in enumerate(recipe.get("datasets") or []):
        path = ds.get("path", "")
        if is_uri(path):
            dest = data_dir / "datasets" / str(n)
            if path.lower().endswith(_DATA_SUFFIXES):
                parts.append(Part(f"dataset[{n}]", partial(_download_file, path, dest)))
            else:
                parts.append(Part(f"dataset[{n}]", partial(_download_tree, path, dest)))
    base = recipe.get("base_model") or ""
    digest = hashlib.sha256(base.encode()).hexdigest()[:12]
    if is_uri(base):
        parts.append(Part("model", partial(_download_tree, base, data_dir / "models" / digest)))
    elif "/" in base and not base.startswith(("builtin:", "/", ".")) and not Path(base).exists():
        parts.append(Part("model", partial(_hf_snapshot, base, data_dir / "models" / digest)))
    if warm_env and parts:  # with nothing to download there is nothing to overlap: the trainer imports once
        parts.append(Part("env", lambda p: _warm_env(workdir, p)))
    return parts


def prewarm(recipe: dict[str, Any], data_dir: Path, workdir: Path, *,
            report: Callable[[dict[str, Any]], None] | None = None, parallel: bool = True,
            warm_env: bool = True) -> PrewarmResult:
    """Run every part (in parallel unless `parallel` is False, for the benchmark's baseline).
    Raises RuntimeError naming the first part that failed."""
    parts = plan_parts(recipe, data_dir, workdir, warm_env=warm_env)
    t0 = time.monotonic()
    stop = threading.Event()

    def snapshot() -> dict[str, Any]:
        return {
            "parts": {p.name: {"done_bytes": p.done, "total_bytes": p.total, "seconds": round(p.seconds, 2),
                               "error": p.error} for p in parts},
            "done_bytes": sum(p.done for p in parts),
            "total_bytes": sum(p.total for p in parts),
        }

    def reporter() -> None:
        while not stop.wait(0.5):
            if report:
                report(snapshot())

    def run_part(p: Part) -> None:
        start = time.monotonic()
        try:
            p.result = p.run(p)
        except Exception as e:  # recorded per part; the first failure is raised below
            p.error = f"{type(e).__name__}: {e}" if not str(e).startswith(p.name) else str(e)
        p.seconds = time.monotonic() - start

    thread = threading.Thread(target=reporter, daemon=True)
    thread.start()
    try:
        if parallel:
            with ThreadPoolExecutor(max(1, len(parts))) as pool:
                list(pool.map(run_part, parts))
        else:
            for p in parts:
                run_part(p)
    finally:
        stop.set()
        thread.join()
    if report:
        report(snapshot())
    failed = [p for p in parts if p.error]
    if failed:
        raise RuntimeError(f"pre-warm of {failed[0].name} failed: {failed[0].error}")
    new = json.loads(json.dumps(recipe))
    for p in parts:
        if p.name.startswith("dataset["):
            n = int(p.name[len("dataset["):-1])
            new["datasets"][n]["path"] = str(p.result)
        elif p.name == "model":
            new["base_model"] = str(p.result)
    return PrewarmResult(recipe=new, parts=snapshot()["parts"], seconds=time.monotonic() - t0)
