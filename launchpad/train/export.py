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

The destination is only ever replaced when it is new, empty, or a folder a previous export wrote (it
holds MARKER): `--out ~` or `--out my-thesis/` must never be deleted to make room for a model.
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
MARKER = ".launchpad-export.json"  # written into every export; its presence is what allows replacing the folder


def check_destination(out: Path) -> Path:
    """The folder an export may write to, or BadInput (exit 2) before any work is done.

    Allowed: a path that does not exist, an empty folder, or a folder holding MARKER. A symlink is
    followed, so the folder it points to is the one replaced (the link keeps working)."""
    out = Path(out).expanduser()
    if out.is_symlink():
        out = out.resolve()
    fix = "give a new or empty folder, or one a previous `launchpad export` wrote"
    if not out.exists():
        return out
    if not out.is_dir():
        raise BadInput(f"--out {out}: is a file, not a folder; {fix}")
    try:
        names = {p.name for p in out.iterdir()}
    except OSError as e:
        raise BadInput(f"--out {out}: cannot list it ({e.strerror or e}); {fix}") from None
    if names and MARKER not in names:
        raise BadInput(f"--out {out}: already holds files that no launchpad export wrote "
                       f"(it would be replaced); {fix}")
    return out


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
                     log: Callable[[str], None] = print, about: dict[str, Any] | None = None) -> tuple[bool, str]:
    """Write the merged (or full) model of one local checkpoint folder to `out`: a new or empty folder,
    or one a previous export wrote (see check_destination). `about` goes into MARKER beside the model.
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

    out = check_destination(out)  # again: the folder may have changed while the model loaded
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".lp-export-{out.name}-", dir=out.parent))
    except OSError as e:
        raise BadInput(f"--out {out}: cannot write in {out.parent} ({e.strerror or e}); give a folder you can write") from None
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        marker = {"format": 1, "merged_adapter": is_adapter, "dtype": name, **(about or {})}
        (tmp / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        _user_modes(tmp)
        _swap_into_place(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"wrote {out} ({'adapter merged into the base' if is_adapter else 'full weights'}, {name})")
    return is_adapter, name


def _user_modes(folder: Path) -> None:
    """The modes the user's umask gives (mkdtemp makes 0700, and launchpad keeps its own home private
    with a umask of 077): the model is the user's, for vLLM/TGI that may run as another user."""
    from ..settings import user_umask

    umask = user_umask()
    for path in (folder, *folder.rglob("*")):
        if not path.is_symlink():
            path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


def _swap_into_place(tmp: Path, out: Path) -> None:
    """Rename the finished `tmp` to `out`; an old export (or empty folder) there is moved aside first
    and deleted only once the new one is in place."""
    if not out.exists():
        os.replace(tmp, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".lp-old-{out.name}-", dir=out.parent)) / "old"
    try:
        os.replace(out, old)
        try:
            os.replace(tmp, out)
        except OSError:
            os.replace(old, out)  # put the previous export back rather than leave nothing
            raise
    finally:
        shutil.rmtree(old.parent, ignore_errors=True)


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
    out = check_destination(out)  # before any download: refuse early
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
        about = {"job": job_id, "step": ref.step, "checkpoint": ref.uri}
        merged, name = merge_checkpoint(local, base, out, dtype=dtype, log=log, about=about)
    finally:
        if workdir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    return ExportResult(path=out, job_id=job_id, step=ref.step, checkpoint_uri=ref.uri,
                        merged_adapter=merged, dtype=name)
