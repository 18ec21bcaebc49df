"""Where the trainer's metrics go besides status.json: the standard tools, through transformers' own
`report_to` integrations (not hand-written loggers).

* **TensorBoard**, always when `tensorboard` is installed (it is in launchpad's ``train`` extra): event
  files in ``<workdir>/runs``, copied to the job's store at ``<job>/runs/`` at every checkpoint and at the
  end, so ``tensorboard --logdir <checkpoint uri>/<job>/runs`` reads them from any machine, after the
  instance is gone. A resumed attempt adds its own event file next to the earlier ones.
* **Weights & Biases** when the recipe sets ``wandb_project`` (Axolotl's keys: ``wandb_entity``,
  ``wandb_name``); the API key comes through the recipe's ``env`` (``WANDB_API_KEY: ${env:WANDB_API_KEY}``),
  never stored.
* **MLflow** when ``MLFLOW_TRACKING_URI`` is set in the trainer's environment.

Neither fails a run: a store that refuses the mirror, or an integration that raises (an MLflow server
that is down, a W&B key that is wrong), is said once in the log and training goes on without it
(`guard_integrations`): metrics are a view, and hours of GPU time are not lost to one.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

RUNS = "runs"
TENSORBOARD_FLUSH_SECONDS = 5.0  # the event file reaches the disk at most this often (and at every checkpoint)


def report_to(recipe: Any, env: Mapping[str, str] = os.environ, log: Callable[[str], None] = print) -> list[str]:
    """The `report_to` integrations for this run (a missing package is said, not fatal)."""
    out: list[str] = []
    if importlib.util.find_spec("tensorboard") is not None:
        out.append("tensorboard")
    else:
        log("tensorboard is not installed: no TensorBoard event files (pip install tensorboard)")
    if getattr(recipe, "wandb_project", None):
        if importlib.util.find_spec("wandb") is not None:
            out.append("wandb")
        else:
            log(f"wandb_project {recipe.wandb_project}: wandb is not installed on the instance: not reporting to W&B "
                "(add it to the image, or `pip install wandb`)")
    if env.get("MLFLOW_TRACKING_URI"):
        if importlib.util.find_spec("mlflow") is not None:
            out.append("mlflow")
        else:
            log("MLFLOW_TRACKING_URI is set but mlflow is not installed: not reporting to MLflow")
    return out


def integration_env(recipe: Any, workdir: Path) -> dict[str, str]:
    """Environment the integrations read when they start: where TensorBoard writes, W&B's project."""
    env = {"TENSORBOARD_LOGGING_DIR": str(workdir / RUNS)}
    for key, var in (("wandb_project", "WANDB_PROJECT"), ("wandb_entity", "WANDB_ENTITY"), ("wandb_name", "WANDB_NAME")):
        value = getattr(recipe, key, None)
        if value:
            env[var] = str(value)
    return env


class RunsMirror:
    """Copies the new or grown files of the local ``runs`` folder to ``<job>/runs/`` in the store."""

    def __init__(self, store: Any, job_id: str, folder: Path, *, log: Callable[[str], None] = print):
        self.store, self.job_id, self.folder, self.log = store, job_id, Path(folder), log
        self._sent: dict[str, int] = {}
        self._failed = False

    def sync(self) -> int:
        """Upload what changed since the last call; the number of files sent. Never raises."""
        if not self.folder.is_dir():
            return 0
        sent = 0
        try:
            for path in sorted(p for p in self.folder.rglob("*") if p.is_file()):
                rel = path.relative_to(self.folder).as_posix()
                size = path.stat().st_size
                if self._sent.get(rel) == size:
                    continue
                self.store.put_file(path, f"{self.job_id}/{RUNS}/{rel}")
                self._sent[rel] = size
                sent += 1
        except Exception as e:  # metrics are a view: a refusing store must not end the run
            if not self._failed:
                self.log(f"warning: cannot copy the TensorBoard logs to the store ({str(e).splitlines()[0]}); "
                         "training goes on")
            self._failed = True
        return sent


def mirror_callback(mirror: RunsMirror, flush: Callable[[], None] = lambda: None):
    """A TrainerCallback that mirrors at every checkpoint save (after `flush`: the event file complete up to
    that step) and at the end of training."""
    from transformers import TrainerCallback

    class MirrorRuns(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            flush()
            mirror.sync()

        def on_train_end(self, args, state, control, **kwargs):
            mirror.sync()

    return MirrorRuns()


def throttle_tensorboard_flush(trainer: Any, every_s: float = TENSORBOARD_FLUSH_SECONDS) -> Callable[[], None]:
    """transformers' TensorBoardCallback flushes its event file at every logged step: ~0.7 ms a step, 2% of
    the smoke recipe's training loop on 2 CPU cores, for a file read every few seconds at most. Its writer's
    flush is made to run at most every `every_s` seconds (the writer still closes, so flushes, at the end).
    Returns a function that flushes now: the runs mirror calls it before copying at a checkpoint."""
    from transformers.integrations import TensorBoardCallback

    tb = next((c for c in (getattr(c, "inner", c) for c in trainer.callback_handler.callbacks)
               if isinstance(c, TensorBoardCallback)), None)
    real: list[Callable[[], None]] = []  # the writer's own flush, once it exists (made at on_train_begin)
    last = [time.monotonic()]

    def flush_now() -> None:
        if real:
            real[0]()
            last[0] = time.monotonic()

    def flush_throttled() -> None:
        if time.monotonic() - last[0] >= every_s:
            flush_now()

    if tb is not None:
        begin = tb.on_train_begin

        def on_train_begin(args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            out = begin(args, state, control, **kwargs)
            writer = getattr(tb, "tb_writer", None)
            if writer is not None and not real:
                real.append(writer.flush)
                writer.flush = flush_throttled
            return out

        tb.on_train_begin = on_train_begin  # type: ignore[method-assign]
    return flush_now


def guard_integrations(trainer: Any, report: list[str], log: Callable[[str], None] = print) -> int:
    """Wrap the trainer's `report_to` callbacks so that the first exception one raises is said once and
    turns that integration off; the number wrapped. (transformers calls them inside the training loop:
    unwrapped, an MLflow server going away at step 9,000 ends the run.)"""
    from transformers import TrainerCallback
    from transformers.integrations import get_reporting_integration_callbacks

    kinds = tuple(get_reporting_integration_callbacks(report))
    handler = trainer.callback_handler
    wrapped = 0
    for i, callback in enumerate(handler.callbacks):
        if isinstance(callback, kinds):
            handler.callbacks[i] = _guarded(TrainerCallback, callback, log)
            wrapped += 1
    return wrapped


def _guarded(base: type, inner: Any, log: Callable[[str], None]) -> Any:
    name = type(inner).__name__.removesuffix("Callback")
    state = {"off": False}

    def forward(event: str) -> Callable[..., Any]:
        def call(self: Any, args: Any, st: Any, control: Any, **kwargs: Any) -> Any:
            if state["off"]:
                return None
            try:
                return getattr(inner, event)(args, st, control, **kwargs)
            except Exception as e:
                state["off"] = True
                first = (str(e).splitlines() or [""])[0][:300]
                log(f"warning: {name} reporting failed ({type(e).__name__}: {first}); training goes on without it")
                return None

        return call

    events = {event: forward(event) for event in dir(base) if event.startswith("on_")}
    return type(f"Guarded{type(inner).__name__}", (base,), {**events, "inner": inner})()
