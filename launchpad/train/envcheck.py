"""The environment check before training: what this machine has, and whether the recipe can run on it.

`collect()` records python/torch/CUDA/driver/GPU and the versions of the training libraries (written to
``<workdir>/env.json``; the agent copies it into status.json). `problems(recipe, env)` lists what makes
the recipe impossible here, worst first; the trainer fails on the first one with one line, in seconds,
instead of an hour later. What only degrades the run (no bf16 -> fp16, no FlashAttention -> SDPA) is
not a problem: the trainer says it in the log and carries on.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..errors import LaunchpadError

LIBRARIES = ("torch", "transformers", "peft", "trl", "accelerate", "datasets", "bitsandbytes", "deepspeed",
             "flash-attn", "launchpad")


class EnvironmentMismatch(LaunchpadError):
    """The recipe cannot run with this machine's software or hardware (exit 1: another machine may do)."""


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _nvidia_smi() -> dict[str, Any]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version,name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=15).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    rows = [[c.strip() for c in line.split(",")] for line in out.strip().splitlines() if line.strip()]
    return {"driver": rows[0][0], "smi_gpus": [r[1] for r in rows]} if rows and rows[0] else {}


def _cuda_tuple(text: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(x) for x in str(text).split(".")[:2]) if text else None
    except ValueError:
        return None


def collect() -> dict[str, Any]:
    """Versions and devices of this machine (imports torch)."""
    import torch

    from .varlen_attention import torch_varlen_kernel

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": {name: _version(name) for name in LIBRARIES},
        "torch_cuda": torch.version.cuda,  # the CUDA torch was built for (None: a CPU build)
        "cuda_available": torch.cuda.is_available(),
        "gpus": [],
        "driver": None,
        "driver_cuda": None,  # the newest CUDA the driver supports
        # FlashAttention's varlen kernel inside torch (>= 2.10): flash_attention: true without flash-attn
        "torch_varlen": torch_varlen_kernel() is not None,
    }
    env.update(_nvidia_smi())
    env.pop("smi_gpus", None)
    if env["cuda_available"]:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            env["gpus"].append({"name": p.name, "memory_gb": round(p.total_memory / 2**30, 1),
                                "capability": f"{p.major}.{p.minor}"})
        try:
            # private API, absent from torch's type information; e.g. 12040
            v = torch._C._cuda_getDriverVersion()  # type: ignore[attr-defined]
            env["driver_cuda"] = f"{v // 1000}.{(v % 1000) // 10}"
        except Exception:  # private API: absence is not a problem
            pass
    return env


def problems(recipe, env: dict[str, Any], *, deepspeed: bool = False) -> list[str]:
    """What stops `recipe` from running in `env`, one line each (empty: it can run)."""
    out: list[str] = []
    v = env["versions"]
    gpus = env["gpus"]
    wants_gpu = recipe.resources.gpu is not None
    if wants_gpu and not env["cuda_available"]:
        why = (f"torch {v['torch']} is a CPU build" if not env["torch_cuda"]
               else f"the driver {env['driver']} cannot run torch's CUDA {env['torch_cuda']}" if env["driver"]
               else "no NVIDIA driver is loaded")
        out.append(f"the recipe asks for GPUs ({recipe.resources.gpu}) but torch sees none: {why}")
    want_cuda = _cuda_tuple(recipe.resources.cuda)
    have_cuda = _cuda_tuple(env["torch_cuda"])
    if gpus and want_cuda and have_cuda and have_cuda < want_cuda:
        out.append(f"resources.cuda {recipe.resources.cuda}: torch {v['torch']} is built for CUDA {env['torch_cuda']}")
    if recipe.adapter == "qlora" and not v["bitsandbytes"]:
        out.append("adapter: qlora needs bitsandbytes, which is not installed (pip install 'launchpad[train]')")
    if deepspeed and not v["deepspeed"]:
        out.append("deepspeed: the recipe uses DeepSpeed, which is not installed (pip install 'launchpad[train]')")
    if getattr(recipe, "flash_attention", "auto") is True:
        if not v["flash-attn"] and not env.get("torch_varlen"):
            out.append(f"flash_attention: true, but flash-attn is not installed and torch {v['torch']} has no "
                       "FlashAttention of its own (torch >= 2.10 has): pip install flash-attn, or flash_attention: auto")
        elif not gpus:
            out.append("flash_attention: true needs a CUDA GPU (use flash_attention: auto to fall back to SDPA)")
        else:
            low = [g for g in gpus if (_cuda_tuple(g["capability"]) or (0,)) < (8, 0)]
            if low:
                out.append(f"flash_attention: true needs compute capability >= 8.0; {low[0]['name']} has "
                           f"{low[0]['capability']} (use flash_attention: auto to fall back to SDPA)")
            elif have_cuda and have_cuda < (11, 7):
                out.append(f"flash_attention: true needs CUDA >= 11.7; torch is built for CUDA {env['torch_cuda']}")
    return out


def summary(env: dict[str, Any]) -> str:
    """One log line: what this run uses."""
    v = env["versions"]
    dev = ", ".join(f"{g['name']} {g['memory_gb']:g} GiB (cc {g['capability']})" for g in env["gpus"]) or "CPU only"
    cuda = f"CUDA {env['torch_cuda']}, driver {env['driver'] or '?'}" if env["torch_cuda"] else "no CUDA"
    libs = ", ".join(f"{n} {v[n] or '-'}" for n in ("transformers", "peft", "trl", "bitsandbytes", "deepspeed", "flash-attn"))
    return f"environment: python {env['python']}, torch {v['torch']} ({cuda}); {dev}; {libs}"


def write_env(path: Path, env: dict[str, Any]) -> None:
    """Atomically, so a reader (the agent) never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(env, indent=1, sort_keys=True))
    os.replace(tmp, path)


def check_environment(recipe, env_path: Path | None, *, deepspeed: bool = False, write: bool = True) -> dict[str, Any]:
    """collect() -> env.json (when `write`) -> raise EnvironmentMismatch on the first problem."""
    env = collect()
    env["problems"] = problems(recipe, env, deepspeed=deepspeed)
    if write and env_path is not None:
        write_env(env_path, env)
    if env["problems"]:
        raise EnvironmentMismatch(env["problems"][0])
    return env


def main(argv: list[str] | None = None) -> int:
    """`python -m launchpad.train.envcheck [--out env.json] [--spec job.json]`: record this machine (to
    --out, else stdout); with --spec also check the job's recipe against it: exit 1 with one line on
    stderr when it cannot run here (the agent runs this while it pre-warms, before the trainer starts)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m launchpad.train.envcheck", description=(main.__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here (atomically)")
    parser.add_argument("--spec", type=Path, default=None, help="job spec whose recipe to check")
    args = parser.parse_args(argv)
    env = collect()
    if args.spec is not None:
        from .spec import TrainJob

        spec = TrainJob.load(args.spec)
        env["problems"] = problems(spec.recipe, env, deepspeed=spec.uses_deepspeed)
    if args.out is not None:
        write_env(args.out, env)
    else:
        json.dump(env, sys.stdout, indent=1)
        print()
    if env.get("problems"):
        print(f"error: {env['problems'][0]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    from ..fast_exit import exit_now

    exit_now(main())
