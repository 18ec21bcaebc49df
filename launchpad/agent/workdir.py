"""Reading and stopping a job's work directory from outside the agent: the one place that knows the
rules, shared by the `local` provider and the SSH host helper (launchpad/ssh/remote.py).

- The job runs until the agent reports a final phase (uploads drained), not merely until the trainer
  exits; after that the agent may stay for its idle watchdog.
- An agent that died before reporting a final phase counts as killed (exit -9) unless the trainer
  recorded a failure of its own. If the work directory's disk is full, that is the reported cause
  (phase "failed", error "disk full: ..."), not the signal: the agent could not even write its end.
- A dead agent's complete hand-overs in its upload queue are the only copy of the newest checkpoint:
  `salvage` uploads them before the machine is torn down.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..train.status import DISK_FULL_PREFIX, disk_full_message, disk_nearly_full
from . import FILES, pid_alive, process_start_time, proctree


@dataclass(frozen=True)
class WorkdirState:
    status: dict[str, Any]
    running: bool
    exit_code: int | None
    autostopped: bool


def read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def agent_alive(workdir: Path) -> bool:
    return pid_alive(workdir / FILES["agent_pid"]) is not None


def job_state(workdir: Path, *, alive: bool | None = None) -> WorkdirState:
    """`alive` overrides the pid-file check (a caller holding the agent's Popen knows better)."""
    status = read_json(workdir / FILES["status"])
    exit_code = read_int(workdir / FILES["exit"])
    alive = agent_alive(workdir) if alive is None else alive
    running = alive and not status.get("finished")
    if not alive and not status.get("finished") and (workdir / FILES["agent_pid"]).exists():
        exit_code = exit_code if exit_code not in (None, 0) else -int(signal.SIGKILL)
        if disk_nearly_full(workdir):
            said = str(status.get("error") or "")
            error = said if said.startswith(DISK_FULL_PREFIX) else (
                f"{disk_full_message(workdir)}; the agent ended before it could report the job's end")
            status = {**status, "phase": "failed", "error": error}
    return WorkdirState(status, running, exit_code, (workdir / "autostopped.json").exists())


def job_running(workdir: Path) -> bool:
    return job_state(workdir).running


def stop(workdir: Path, grace: float = 10.0) -> list[int]:
    """SIGTERM the agent's process group (its trainer goes with it) and the trainer, wait up to `grace`
    seconds for them and every process they started to end, then SIGKILL whatever is left, torchrun's
    workers (sessions of their own) included, and wait for the kernel to end those. When it returns,
    nothing of the job writes into `workdir` any more. Returns the pids that were running."""
    pids = [p for p in (pid_alive(workdir / FILES["agent_pid"]), pid_alive(workdir / FILES["trainer_pid"])) if p]
    tree = proctree.track(*pids)  # before any signal, while every worker is still its launcher's child
    _signal_all(pids, signal.SIGTERM)
    proctree.wait_gone(tree, grace)
    _signal_all([p for p in pids if process_start_time(p)], signal.SIGKILL)
    proctree.kill(tree)
    return pids


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            if os.getpgid(pid) == pid:  # the agent leads its own session
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def salvage(workdir: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """Upload what a dead agent left in its upload queue (launchpad.agent.uploader.salvage_queue):
    {"uploaded": [CheckpointRef as dict, ...]}, or {"skipped": why} (its agent is alive, nothing synced)."""
    from ..errors import BadInput
    from ..jobspec import JobSpec
    from .uploader import QUEUE_DIR, ready_checkpoints, salvage_queue

    if agent_alive(workdir):
        return {"skipped": "its agent is alive and uploads them itself"}
    if not ready_checkpoints(workdir / QUEUE_DIR):
        return {"uploaded": []}
    try:
        spec = JobSpec.load(workdir / FILES["spec"])
    except BadInput:
        return {"skipped": "no job.json"}
    if spec.checkpoint_uri is None:
        return {"skipped": "no checkpoint store"}
    from ..recipe import recipe_hash
    from ..storage import open_store

    try:
        made_with: str | None = recipe_hash(spec.recipe_model())
    except ValueError:  # a recipe this version cannot read: the manifest just says less
        made_with = None
    refs = salvage_queue(open_store(spec.checkpoint_uri), spec.job_id, workdir / QUEUE_DIR,
                         keep=spec.checkpoint_keep, recipe_hash=made_with, log=log)
    return {"uploaded": [dataclasses.asdict(r) for r in refs]}
