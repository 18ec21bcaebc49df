"""How the agent starts the trainer: one process, or a launcher that starts one per GPU (and per node).

    argv, extra_env = trainer_command(workdir / "job.json", spec)
    subprocess.Popen(argv, env={**os.environ, **extra_env}, cwd=workdir, ...)

- plain LoRA/QLoRA/full on one GPU (or CPU): ``python -m launchpad.train --spec job.json``;
- DeepSpeed, several GPUs or several nodes: ``python -m torch.distributed.run`` (torchrun) with one
  process per GPU. Every node's agent runs the same command with its own ``--node_rank``; no SSH
  between nodes is needed (DeepSpeed's own launcher would fan out over pdsh). ``launcher="deepspeed"``
  gives the `deepspeed` launcher instead (``--no_ssh`` per node); both set RANK/WORLD_SIZE/MASTER_ADDR,
  so the trainer never falls back to DeepSpeed's mpi4py discovery.
- multi-node: the job spec carries ``nodes: [{"rank", "address"}]``, ``master_addr``, ``master_port``
  (and each node its ``node_rank``); a hostfile (``<address> slots=<gpus>``) is written next to the spec.

This module imports nothing heavy (no torch): the agent calls it before the trainer exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..jobspec import JobSpec

DEFAULT_MASTER_PORT = 29500
HOSTFILE = "hostfile"


def gpu_count() -> int:
    """GPUs this process may use: CUDA_VISIBLE_DEVICES if set, else `nvidia-smi -L`; 0 without any."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    exe = shutil.which("nvidia-smi")
    if not exe:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=15).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def _cache_dir(spec: JobSpec, spec_path: str, name: str) -> str:
    home = os.environ.get("LAUNCHPAD_HOME")
    base = Path(home) / "cache" if home else Path(spec.workdir or Path(spec_path).parent) / "cache"
    return str(base / name)


def needs_launcher(spec: JobSpec, *, nnodes: int, nproc_per_node: int) -> bool:
    return bool(spec.recipe.get("deepspeed") or spec.deepspeed_config) or nnodes > 1 or nproc_per_node > 1


def trainer_command(
    spec_path: str | os.PathLike,
    spec: JobSpec | Mapping[str, Any],
    *,
    node_rank: int | None = None,
    nnodes: int | None = None,
    master_addr: str | None = None,
    master_port: int | None = None,
    nproc_per_node: int | None = None,
    launcher: str = "torchrun",
) -> tuple[list[str], dict[str, str]]:
    """(argv, extra environment) that start the trainer for `spec` (the job.json at `spec_path`, as a
    `JobSpec` or its JSON).

    Keyword arguments win over the spec, the spec over defaults: node_rank (spec "node_rank", else 0),
    nnodes (len(spec "nodes"), else recipe resources.nodes, else 1), master_addr (spec "master_addr",
    else the rank-0 node's address, else 127.0.0.1), master_port (spec, else 29500), nproc_per_node
    (the GPUs here, at least 1). `launcher`: "torchrun" or "deepspeed". Writes `<spec dir>/hostfile`
    for multi-node jobs. The extra environment holds only launchpad's defaults (thread count, the
    DeepSpeed op cache); variables already set in the agent's environment are not overridden.
    """
    if launcher not in ("torchrun", "deepspeed"):
        raise ValueError(f"launcher must be 'torchrun' or 'deepspeed', not {launcher!r}")
    spec_path = str(Path(spec_path).resolve())
    if not isinstance(spec, JobSpec):
        spec = JobSpec.from_json(dict(spec), source=spec_path)
    nodes: list[dict[str, Any]] = [{"rank": n.rank, "address": n.address} for n in spec.nodes]
    if nnodes is None:
        nnodes = len(nodes) or int((spec.recipe.get("resources") or {}).get("nodes") or 1)
    if node_rank is None:
        node_rank = int(spec.node_rank or 0)
    if master_addr is None:
        first = next((n["address"] for n in nodes if int(n["rank"]) == 0), None)
        master_addr = spec.master_addr or first or "127.0.0.1"
    if master_port is None:
        master_port = int(spec.master_port or DEFAULT_MASTER_PORT)
    if nproc_per_node is None:
        nproc_per_node = max(1, gpu_count())
    if not 0 <= node_rank < nnodes:
        raise ValueError(f"node_rank {node_rank} is not in 0..{nnodes - 1}")

    env: dict[str, str] = {}
    if "OMP_NUM_THREADS" not in os.environ:  # torchrun would force 1; one share of the cores per rank
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // nproc_per_node))
    if "TORCH_EXTENSIONS_DIR" not in os.environ:  # DeepSpeed compiles ops on first use: keep them
        env["TORCH_EXTENSIONS_DIR"] = _cache_dir(spec, spec_path, "torch_extensions")
    env.update({k: v for k, v in spec.env.items() if k not in os.environ})  # the provider's (NCCL/EFA)
    module = ["-m", "launchpad.train", "--spec", spec_path]
    if not needs_launcher(spec, nnodes=nnodes, nproc_per_node=nproc_per_node):
        return [sys.executable, *module], env

    hostfile = None
    if nnodes > 1 and nodes:
        from .distributed import write_hostfile

        hostfile = write_hostfile(Path(spec_path).parent / HOSTFILE, nodes, nproc_per_node)
    if launcher == "deepspeed":
        argv = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_nodes", str(nnodes),
                "--num_gpus", str(nproc_per_node), "--master_addr", master_addr, "--master_port", str(master_port)]
        if nnodes > 1:
            argv += ["--no_ssh", "--node_rank", str(node_rank)]
            if hostfile is not None:
                argv += ["--hostfile", str(hostfile)]
        return [*argv, "--module", *module[1:]], env
    # torchrun's per-attempt folders (and a failed worker's error file) go beside the job, not into /tmp
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc_per_node),
            "--log-dir", str(Path(spec_path).parent / "torchrun")]
    if nnodes == 1:
        # A free port on this machine: two single-node jobs side by side must not collide.
        argv += ["--standalone"]
    else:
        argv += ["--nnodes", str(nnodes), "--node_rank", str(node_rank),
                 "--master_addr", master_addr, "--master_port", str(master_port)]
    return [*argv, *module], env
