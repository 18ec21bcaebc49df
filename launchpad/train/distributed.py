"""The trainer as one of several processes (torchrun / deepspeed launcher; one or many nodes).

Who does what when a job runs as N ranks:
  - every rank trains; HF Trainer / DeepSpeed own the collectives;
  - the node's local rank 0 writes status.json and env.json, downloads the resume checkpoint (the other
    ranks of the node wait on a file lock, then use the same folder) and clears stale output;
  - global rank 0 alone hands checkpoints to the uploader (so one MANIFEST.json per checkpoint);
  - a save is collective (ZeRO gathers and shards), so the decision is made collectively: SAVE_NOW seen
    by any rank means every rank saves at that step end (`SyncSaveCallback`);
  - without a shared filesystem, files only other nodes wrote (their ZeRO shards, RNG states) are
    passed through the store into rank 0's checkpoint folder before it is handed over
    (`NodeFilesCallback`), so the uploaded checkpoint is whole and resumable on any set of machines.

Rank numbers come from the launcher's environment (torchrun: RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK; deepspeed: CROSS_RANK for the node).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .status import StatusWriter


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world_size: int = 1
    node_rank: int = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Ranks:
        env = os.environ if environ is None else environ

        def num(*names: str, default: int) -> int:
            for name in names:
                try:
                    return int(env[name])
                except (KeyError, ValueError):
                    continue
            return default

        world = num("WORLD_SIZE", default=1)
        local_world = num("LOCAL_WORLD_SIZE", "LOCAL_SIZE", default=world)
        rank = num("RANK", default=0)
        return cls(
            rank=rank,
            local_rank=num("LOCAL_RANK", default=0),
            world_size=world,
            local_world_size=local_world,
            node_rank=num("GROUP_RANK", "CROSS_RANK", "NODE_RANK", default=rank // max(1, local_world)),
        )

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_node_main(self) -> bool:
        return self.local_rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


class _QuietStatus(StatusWriter):
    """Same interface, writes nothing: status.json belongs to the node's local rank 0."""

    def _write_locked(self) -> None:
        pass


def status_writer(path: Path, job_id: str, ranks: Ranks | None = None) -> StatusWriter:
    ranks = ranks or Ranks.from_env()
    return StatusWriter(path, job_id) if ranks.is_node_main else _QuietStatus(path, job_id)


class NoUpload:
    """The uploader of ranks other than 0: rank 0 hands over the (whole) checkpoint for everyone."""

    def submit(self, local_dir: Path, step: int) -> None:
        return None

    def close(self) -> None:
        return None


@contextmanager
def node_lock(path: Path) -> Iterator[None]:
    """An exclusive lock shared by the processes of one machine (flock on `path`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def write_hostfile(path: Path, nodes: list[dict[str, Any]], slots: int) -> Path:
    """A DeepSpeed/MPI-style hostfile, `<address> slots=<n>` per node in rank order."""
    lines = [f"{n['address']} slots={int(slots)}" for n in sorted(nodes, key=lambda n: int(n["rank"]))]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, path)
    return path


def _listing(folder: Path) -> dict[str, int]:
    if not folder.is_dir():
        return {}
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in folder.rglob("*") if p.is_file()}


def make_distributed_callbacks(ranks: Ranks, store, job_id: str, log: Callable[[str], None] = print) -> tuple[list, list]:
    """(callbacks to run before launchpad's own, callbacks to run after them). Empty for one process."""
    if not ranks.distributed:
        return [], []
    import torch
    import torch.distributed as dist
    from transformers import TrainerCallback

    def device() -> Any:
        # NCCL collectives need a CUDA tensor; gloo (CPU) a CPU one.
        return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")

    class SyncSaveCallback(TrainerCallback):
        """After every other callback has had its say: save if any rank wants to (SAVE_NOW is per node)."""

        def on_step_end(self, args, state, control, **kwargs):
            if dist.is_initialized():
                flag = torch.tensor([1 if control.should_save else 0], device=device())
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                control.should_save = bool(flag.item())
            return control

    class NodeFilesCallback(TrainerCallback):
        """Before the checkpoint is handed over: copy what only other nodes wrote into rank 0's folder."""

        def on_save(self, args, state, control, **kwargs):
            if not dist.is_initialized():
                return control
            from ..storage.checkpoints import checkpoint_key

            step = state.global_step
            folder = Path(args.output_dir) / f"checkpoint-{step}"
            dist.barrier()  # every rank of every node has written its part of the checkpoint
            mine = (ranks.node_rank, _listing(folder)) if ranks.is_node_main else None
            everyone: list = [None] * ranks.world_size
            dist.all_gather_object(everyone, mine)
            listings = [x for x in everyone if x is not None]
            main_node, main_files = everyone[0]  # rank 0 is its node's local rank 0
            wanted = {node: sorted(set(files) - set(main_files)) for node, files in listings if node != main_node}
            key = checkpoint_key(job_id, step)
            mine_to_send = wanted.get(ranks.node_rank, []) if ranks.is_node_main and not ranks.is_main else []
            for rel in mine_to_send:
                store.put_file(folder / rel, f"{key}/{rel}")
            dist.barrier()
            if ranks.is_main:
                fetched = 0
                for _node, rels in sorted(wanted.items()):
                    for rel in rels:
                        store.get_file(f"{key}/{rel}", folder / rel)
                        fetched += 1
                if fetched:
                    log(f"checkpoint-{step}: gathered {fetched} files written on other nodes")
            return control

    return [NodeFilesCallback()], [SyncSaveCallback()]
