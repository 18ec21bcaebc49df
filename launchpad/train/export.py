"""`launchpad export JOB`: a job's checkpoint as a standard Hugging Face model folder (what vLLM, TGI
or `AutoModelForCausalLM.from_pretrained` load).

- LoRA / QLoRA: the base model is loaded in 16/32-bit (never 4-bit: merging into quantised weights
  would round the adapter away), the adapter applied and merged (`merge_and_unload`), including any
  `lora_modules_to_save` (e.g. a retrained lm_head). For QLoRA the result equals the adapter on the
  full-precision base; it differs from the 4-bit training model by the quantisation error only.
- full: the checkpoint's own weights (ZeRO-3 checkpoints carry them gathered, see configs/deepspeed).

The folder gets the model (safetensors), its config with `use_cache: true` again (training turns it
off), the generation config and the tokenizer saved with the checkpoint. It is written next to its
destination and renamed into place, so a failed export leaves no half model behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInput, IncompleteCheckpoint

DTYPES = ("auto", "bfloat16", "float16", "float32")


@dataclass(frozen=True)
class ExportResult:
    path: Path
    job_id: str
    step: int
    checkpoint_uri: str
    merged_adapter: bool
    dtype: str


def _torch_dtype(dtype: str, config_path: Path):
    import torch

    if dtype == "auto":  # the dtype the base is published in (what a server expects)
        try:
            cfg = json.loads(config_path.read_text())
            dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "float32"
        except (OSError, ValueError):
            dtype = "float32"
    if dtype not in DTYPES[1:]:
        dtype = "float32"
    return getattr(torch, dtype), dtype


def merge_checkpoint(checkpoint_dir: Path, base_model_path: str | None, out: Path, *, dtype: str = "auto",
                     log: Callable[[str], None] = print) -> tuple[bool, str]:
    """Write the merged (or full) model of one local checkpoint folder to `out` (replaced if present).
    Returns (merged an adapter?, dtype written)."""
    import warnings

    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    checkpoint_dir = Path(checkpoint_dir)
    is_adapter = (checkpoint_dir / "adapter_config.json").is_file()
    if is_adapter:
        if base_model_path is None:
            raise BadInput(f"{checkpoint_dir} holds a LoRA adapter: the base model is needed to merge it")
        torch_dtype, name = _torch_dtype(dtype, Path(base_model_path) / "config.json")
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(base_model_path, dtype=torch_dtype)
        model = PeftModel.from_pretrained(base, str(checkpoint_dir)).merge_and_unload()
    elif (checkpoint_dir / "config.json").is_file():
        torch_dtype, name = _torch_dtype(dtype, checkpoint_dir / "config.json")
        model = AutoModelForCausalLM.from_pretrained(str(checkpoint_dir), dtype=torch_dtype)
    else:
        raise IncompleteCheckpoint(f"{checkpoint_dir}: neither an adapter nor model weights in this checkpoint")
    model.config.use_cache = True  # training switched the KV cache off; serving wants it
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint_dir))

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".lp-export-{out.name}-", dir=out.parent))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        if out.exists():
            old = out.with_name(f".lp-old-{out.name}-{os.getpid()}")
            os.replace(out, old)
            shutil.rmtree(old, ignore_errors=True)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"wrote {out} ({'adapter merged into the base' if is_adapter else 'full weights'}, {name})")
    return is_adapter, name


def export_job(job_id: str, recipe: Any, checkpoint_uri: str, out: Path, *, step: int | None = None,
               workdir: Path | None = None, dtype: str = "auto", log: Callable[[str], None] = print) -> ExportResult:
    """Export the newest complete checkpoint of `job_id` (or the one at `step`) from the store at
    `checkpoint_uri` to the folder `out`. `recipe` is a Recipe or its JSON dict. `workdir` caches
    downloads (default: a temporary folder removed afterwards)."""
    from ..recipe import Recipe
    from ..storage import open_store
    from ..storage.checkpoints import (
        download_checkpoint,
        latest_checkpoint,
        list_checkpoints,
    )
    from .trainer import resolve_base_model

    if dtype not in DTYPES:
        raise BadInput(f"--dtype must be one of {', '.join(DTYPES)}")
    if isinstance(recipe, dict):
        recipe = Recipe.model_validate(recipe)
    store = open_store(checkpoint_uri)
    if step is None:
        ref = latest_checkpoint(store, job_id)
    else:
        ref = next((r for r in list_checkpoints(store, job_id) if r.step == step), None)
    if ref is None:
        which = f"checkpoint-{step}" if step is not None else "complete checkpoint"
        raise BadInput(f"{job_id}: no {which} in {store.uri()} (`launchpad status {job_id}` shows the last one)")
    scratch = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="lp-export-"))
    try:
        log(f"downloading {ref.name} of {job_id} ({ref.bytes / 1e6:.1f} MB)")
        local = download_checkpoint(store, ref, scratch / "checkpoints" / job_id / ref.name)
        base = resolve_base_model(recipe.base_model, scratch) if (local / "adapter_config.json").is_file() else None
        merged, name = merge_checkpoint(local, base, Path(out), dtype=dtype, log=log)
    finally:
        if workdir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    return ExportResult(path=Path(out), job_id=job_id, step=ref.step, checkpoint_uri=ref.uri,
                        merged_adapter=merged, dtype=name)
