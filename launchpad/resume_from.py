"""`checkpoint.resume_from`: start a job's first attempt from a Hugging Face Trainer checkpoint folder
(Axolotl's `resume_from_checkpoint`), e.g. the `checkpoint-N` an Axolotl or hand-written TRL run left in
its output_dir.

The folder gives the weights (the adapter for LoRA/QLoRA, the model for a full fine-tune), the optimizer,
the scheduler, the RNG state and the step: the trainer passes it to `trainer.train(resume_from_checkpoint=)`,
which reads it as Hugging Face's Trainer does. Only the first attempt starts there. Once the job has a
complete checkpoint of its own in the store, every resume (preemption, crash, `launchpad resume`) starts
from that, so a job never goes back to the folder. The folder is checked when the recipe loads, before any
cloud API is called (`inspect`, `problems`); a VM provider copies it to the instance with the job's other
inputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
_WHERE = "name a checkpoint-N folder of the earlier run's output_dir"


@dataclass(frozen=True)
class StartPoint:
    folder: str
    step: int
    adapter: dict[str, Any] | None  # adapter_config.json of a PEFT (LoRA) checkpoint
    deepspeed: bool  # a global_step* folder: saved under DeepSpeed (the optimizer state is in there)


def inspect(folder: str) -> StartPoint:
    """What the checkpoint folder holds. Raises ValueError (one line, with the fix) when it is not one."""
    path = Path(folder)
    if not path.is_dir():
        raise ValueError(f"must be a checkpoint folder, not a file: {folder} ({_WHERE})")
    state = path / "trainer_state.json"
    if not state.is_file():
        raise ValueError(f"not a Hugging Face Trainer checkpoint (no trainer_state.json in {folder}): {_WHERE}")
    try:
        step = int(json.loads(state.read_text(encoding="utf-8"))["global_step"])
    except (OSError, ValueError, TypeError, KeyError):
        raise ValueError(f"{state} has no readable global_step: {_WHERE}") from None
    adapter = None
    if (path / "adapter_config.json").is_file():
        try:
            adapter = json.loads((path / "adapter_config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise ValueError(f"{path / 'adapter_config.json'} is not valid JSON") from None
        if not isinstance(adapter, dict):
            raise ValueError(f"{path / 'adapter_config.json'} must hold a JSON object")
    elif not any((path / name).is_file() for name in _WEIGHTS):
        raise ValueError(f"no weights in {folder} (adapter_config.json + adapter_model.safetensors for LoRA, "
                         f"model.safetensors for a full fine-tune): {_WHERE}")
    return StartPoint(str(path), step, adapter, any(p.is_dir() for p in path.glob("global_step*")))


def problems(recipe: Any, start: StartPoint) -> list[str]:
    """What makes `recipe` unable to continue from `start`, one line each (field first, then the fix)."""
    out: list[str] = []
    key = "checkpoint.resume_from"
    lora = recipe.adapter in ("lora", "qlora")
    if lora and start.adapter is None:
        out.append(f"{key}: {start.folder} holds a full model, not a LoRA adapter: set adapter: full, or name "
                   "the checkpoint of a LoRA run")
    elif not lora and start.adapter is not None:
        out.append(f"{key}: {start.folder} holds a LoRA adapter (adapter_config.json): set adapter: lora (or qlora)")
    elif lora and start.adapter is not None:
        for field, theirs in (("lora_r", start.adapter.get("r")), ("lora_alpha", start.adapter.get("lora_alpha"))):
            if isinstance(theirs, int) and theirs != getattr(recipe, field):
                out.append(f"{key}: {start.folder} was trained with {field}: {theirs}, the recipe has "
                           f"{field}: {getattr(recipe, field)}: set {field}: {theirs}")
    if recipe.deepspeed and not start.deepspeed:
        out.append(f"{key}: {start.folder} was not saved under DeepSpeed (no global_step* folder), so ZeRO cannot "
                   "load its optimizer state: remove deepspeed:, or name the checkpoint of a DeepSpeed run")
    elif not recipe.deepspeed and start.deepspeed:
        out.append(f"{key}: {start.folder} was saved under DeepSpeed (its optimizer state is in global_step*, "
                   "which only DeepSpeed reads): set deepspeed: to the ZeRO stage it ran with")
    if recipe.max_steps is not None and start.step >= recipe.max_steps:
        out.append(f"{key}: {start.folder} is at step {start.step} and max_steps is {recipe.max_steps}: nothing is "
                   f"left to train (set max_steps above {start.step})")
    return out
