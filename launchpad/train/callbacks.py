"""TrainerCallbacks: progress into status.json and the log, checkpoints into the store, save-now requests.

They import transformers lazily through `make_callbacks`, so importing this module stays cheap.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from .status import StatusWriter
from .upload import CheckpointUploader


def make_callbacks(
    status: StatusWriter,
    uploader: CheckpointUploader,
    save_now_flag: Path,
    *,
    log: Callable[[str], None] = print,
) -> list:
    from transformers import TrainerCallback

    class ProgressCallback(TrainerCallback):
        """One log line and one status.json write per logging step; tokens/s over the last interval;
        seconds per step since the first step ended (the ETA's basis: the first step's compile and
        warm-up would skew it); eval loss when the trainer evaluates."""

        def __init__(self) -> None:
            self._last: tuple[float, int] | None = None
            self._first: tuple[float, int] | None = None  # (when, global step) at the end of the first step

        def on_train_begin(self, args, state, control, **kwargs):
            self._last = (time.monotonic(), state.num_input_tokens_seen)
            status.update(phase="training", step=state.global_step, total_steps=state.max_steps, epoch=state.epoch)

        def on_step_end(self, args, state, control, **kwargs):
            status.mark("first_step")  # once: the end of the first optimizer step (time to first step)
            if self._first is None:
                self._first = (time.monotonic(), state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = logs or {}
            if "eval_loss" in logs:
                status.add_eval_loss(state.global_step, float(logs["eval_loss"]))
                log(f"step {state.global_step}/{state.max_steps} eval loss {float(logs['eval_loss']):.4f}")
            if "loss" not in logs:
                return
            now, seen = time.monotonic(), state.num_input_tokens_seen
            tps = None
            if self._last is not None and now > self._last[0] and seen > self._last[1]:
                tps = round((seen - self._last[1]) / (now - self._last[0]), 1)
            self._last = (now, seen)
            step_s = None
            if self._first is not None and state.global_step > self._first[1]:
                step_s = round((now - self._first[0]) / (state.global_step - self._first[1]), 4)
            loss = float(logs["loss"])
            status.add_loss(state.global_step, loss, epoch=state.epoch, tokens_per_s=tps, total_steps=state.max_steps,
                            **({"step_seconds": step_s} if step_s else {}))
            lr = logs.get("learning_rate")
            log(
                f"step {state.global_step}/{state.max_steps} loss {loss:.4f}"
                + (f" lr {lr:.2e}" if isinstance(lr, float) else "")
                + (f" tokens/s {tps:.0f}" if tps else "")
            )

    class CheckpointCallback(TrainerCallback):
        """Honours SAVE_NOW, and uploads each saved checkpoint-N folder through the uploader."""

        def on_step_end(self, args, state, control, **kwargs):
            if save_now_flag.exists():
                # Consume the request now: one written while we save is a new request, not lost.
                save_now_flag.unlink(missing_ok=True)
                log(f"save requested ({save_now_flag.name}): saving at step {state.global_step}")
                control.should_save = True
            if control.should_save:
                status.update(phase="saving", step=state.global_step)
            return control

        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            uploader.submit(folder, state.global_step)
            status.update(phase="training")

    return [ProgressCallback(), CheckpointCallback()]
