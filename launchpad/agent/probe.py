"""``python -m launchpad.agent.probe``: the all-reduce probe of the multi-node preflight, ON each node.

Every node of a job runs it at once (started over the command transport by `launchpad.preflight`,
with the venv python sync created); the ranks meet at ``tcp://MASTER_ADDR:MASTER_PORT`` (the job's
master port + 1: the trainer's own port stays free) and time a few seconds of `torch.distributed`
all-reduce, as nccl-tests' ``all_reduce_perf`` does:

    --gpus 0   one process per node, gloo on CPU, a 32 MB float32 tensor
    --gpus G   G processes per node (one per GPU, NCCL), a 256 MB tensor each: NCCL over InfiniBand
               or EFA only nears its plateau at a few hundred MB, so smaller messages would read as
               an under-performing fabric

Two warm-up all-reduces, one to size the run (so it lasts about ``--seconds``; every rank then takes
the smallest count, so all agree), then the timed ones. The slowest rank's time counts. Bandwidths are
nccl-tests': algbw = bytes / time per all-reduce, busbw = algbw x 2(n-1)/n for n ranks, in GB/s
(1e9 bytes) -- busbw is what a link of that speed would carry, comparable across world sizes.

stdin: an optional JSON object of environment variables (the recipe's env: NCCL_*/GLOO_* settings
reach the probe as they reach the trainer, never in a command line). stdout: one JSON line from each
node's first process: {"backend", "device", "world_size", "procs_per_node", "size_bytes", "iters",
"seconds", "algbw_GBps", "busbw_GBps"}. Every process bounds itself with an alarm (``--timeout`` plus
a margin), so nothing is left running when a peer never arrives.

Stdlib + torch only (torch is imported inside the functions: importing this module stays light).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any

CPU_BYTES = 32 << 20
GPU_BYTES = 256 << 20
_ALARM_MARGIN = 30  # seconds past the rendezvous timeout before a process ends itself


def bus_bandwidth(algbw: float, world_size: int) -> float:
    """nccl-tests' bus bandwidth of an all-reduce: algbw x 2(n-1)/n (0 for a single rank)."""
    return algbw * 2 * (world_size - 1) / world_size if world_size > 1 else 0.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m launchpad.agent.probe", description=__doc__.splitlines()[0])
    p.add_argument("--node-rank", type=int, required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--master-addr", required=True)
    p.add_argument("--master-port", type=int, required=True)
    p.add_argument("--gpus", type=int, default=0, help="GPUs per node (one process each, NCCL); 0 = gloo on CPU")
    p.add_argument("--size-mb", type=float, default=None, help="tensor size per process (default 32 CPU, 256 GPU)")
    p.add_argument("--seconds", type=float, default=2.0, help="how long the timed all-reduces should take")
    p.add_argument("--timeout", type=float, default=60.0, help="rendezvous and collective timeout, seconds")
    return p


def _url(addr: str, port: int) -> str:
    return f"tcp://[{addr}]:{port}" if ":" in addr else f"tcp://{addr}:{port}"


def _worker(local_rank: int, args: argparse.Namespace) -> None:
    """One rank: meet the others, time the all-reduces, print the result (each node's first process)."""
    signal.alarm(int(args.timeout) + _ALARM_MARGIN)
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    procs = max(1, args.gpus)
    rank, world = args.node_rank * procs + local_rank, args.nodes * procs
    if args.gpus:
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if backend == "gloo" and args.master_addr in ("127.0.0.1", "localhost") and "GLOO_SOCKET_IFNAME" not in os.environ:
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # every rank is on this machine: keep gloo on loopback
    dist.init_process_group(backend, init_method=_url(args.master_addr, args.master_port), rank=rank,
                            world_size=world, timeout=timedelta(seconds=args.timeout))
    try:
        size = int((args.size_mb * (1 << 20)) if args.size_mb else (GPU_BYTES if args.gpus else CPU_BYTES))
        x = torch.zeros(size // 4, dtype=torch.float32, device=device)  # zeros: sums never overflow

        def timed(n: int) -> float:
            if args.gpus:
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            for _ in range(n):
                dist.all_reduce(x)
            if args.gpus:
                torch.cuda.synchronize(device)
            return time.perf_counter() - t0

        timed(2)  # warm-up: connections, buffers, NCCL channels
        one = max(timed(1), 1e-6)
        count = torch.tensor([max(3, min(200, int(args.seconds / one)))], device=device)
        dist.all_reduce(count, op=dist.ReduceOp.MIN)  # every rank runs the same number
        iters = int(count.item())
        dist.barrier()
        spent = torch.tensor([timed(iters)], dtype=torch.float64, device=device)
        dist.all_reduce(spent, op=dist.ReduceOp.MAX)  # the slowest rank's time counts
        seconds = float(spent.item())
        algbw = x.numel() * x.element_size() * iters / seconds / 1e9
        if local_rank == 0:
            result: dict[str, Any] = {
                "backend": backend, "device": torch.cuda.get_device_name(device) if args.gpus else "cpu",
                "world_size": world, "procs_per_node": procs, "size_bytes": x.numel() * x.element_size(),
                "iters": iters, "seconds": round(seconds, 6), "algbw_GBps": round(algbw, 4),
                "busbw_GBps": round(bus_bandwidth(algbw, world), 4),
            }
            sys.stdout.write(json.dumps(result) + "\n")
            sys.stdout.flush()
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not 0 <= args.node_rank < args.nodes:
        sys.stderr.write(f"probe: --node-rank {args.node_rank} is not in 0..{args.nodes - 1}\n")
        return 2
    raw = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    env = json.loads(raw) if raw.strip() else {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        sys.stderr.write("probe: stdin must be a JSON object of strings\n")
        return 2
    os.environ.update(env)
    signal.alarm(int(args.timeout) + _ALARM_MARGIN)
    import torch

    if args.gpus:
        seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if seen < args.gpus:
            sys.stderr.write(f"probe: this node sees {seen} CUDA device(s); the job expects {args.gpus}\n")
            return 3
    if args.gpus > 1:
        import torch.multiprocessing as mp

        mp.spawn(_worker, args=(args,), nprocs=args.gpus, join=True)
    else:
        _worker(0, args)
    return 0


if __name__ == "__main__":
    from ..fast_exit import exit_now

    exit_now(main())
