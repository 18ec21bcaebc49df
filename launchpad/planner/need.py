"""Recipe -> `Need`: the GPU spec, the memory estimate and the amount of work; the only network I/O is a few
small files of a Hub model that is neither bundled nor cached (config.json, the tokenizer's, each cached)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..errors import RecipeError
from ..train.packing import PACKING_LEAKS
from .disk import disk_need
from .memory import GIB, estimate_memory, recipe_shape, setup_from_recipe
from .model_files import check_chat_template
from .settings import planner_settings
from .types import Need


def _dataset_bytes(recipe: Any, base_dir: Path | None) -> float | None:
    """Total bytes of the recipe's datasets when every one is a local file/dir; None when any is remote."""
    total = 0.0
    for ds in recipe.datasets:
        raw = ds.path[len("file://"):] if ds.path.startswith("file://") else ds.path
        if "://" in raw:
            return None
        p = Path(raw).expanduser()
        if not p.is_absolute() and base_dir is not None:
            p = base_dir / p
        if p.is_file():
            total += p.stat().st_size
        elif p.is_dir():
            total += sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
        else:
            return None  # a hub dataset id
    return total


# Host (CPU-side) need per node. Loading the base model goes through host RAM: the bf16 checkpoint is read
# (memory-mapped safetensors, shard by shard, but the page cache holds it) before the weights move to the
# GPUs, so a node needs about the checkpoint's size plus what the OS, the agent and each trainer process
# (CUDA runtime, data loader) use. ZeRO offload keeps optimizer states / parameters in host RAM on top.
HOST_SYSTEM_GB = 4.0
HOST_PER_GPU_GB = 3.0
HOST_CPUS_PER_GPU = 2  # the trainer process and its data-loader worker


def _host_need(params: int, memory: Any, nodes: int) -> tuple[float, str]:
    """(GB of host RAM per node besides the per-GPU part, a one-line why)."""
    weights = params * 2.0 / GIB
    why = [f"{weights:.1f} GB to load the bf16 weights", f"{HOST_SYSTEM_GB:g} GB system",
           f"{HOST_PER_GPU_GB:g} GB per GPU process"]
    offload = 0.0
    if memory is not None:
        s = memory.setup
        if s.offload_optimizer and s.zero_stage >= 1:
            offload += memory.offloadable_gb / max(1, nodes)
        if s.offload_param and s.zero_stage >= 3:
            offload += memory.weights_gb / max(1, nodes)
    if offload:
        why.append(f"{offload:.1f} GB ZeRO offload")
    return HOST_SYSTEM_GB + weights + offload, " + ".join(why)


def _shape_or_error(recipe: Any, where: str):
    """The model's shape; an unknown model is a recipe error naming the file and the fix (never "any GPU")."""
    from .shapes import UnknownModel

    try:
        return recipe_shape(recipe)
    except UnknownModel as exc:
        raise RecipeError(f"{where}: base_model: {exc}") from None


def need_from_recipe(recipe: Any) -> Need:
    """What `recipe` (a `launchpad.recipe.Recipe`) needs. Raises `RecipeError` for a GPU spec that
    does not parse."""
    from ..gpuspec import parse_gpu_spec

    res = recipe.resources
    est = planner_settings()["estimate"]
    src = getattr(recipe, "source_path", None)
    base_dir = Path(src).parent if src else None
    notes: list[str] = []
    spec = None
    if res.gpu:
        try:
            spec = parse_gpu_spec(res.gpu)
        except ValueError as exc:
            raise RecipeError(f"{src or 'recipe'}: resources.gpu: {exc}") from None

    where = getattr(recipe, "_source_shown", None) or src or "recipe"  # the file as the user named it
    shape = _shape_or_error(recipe, where)
    check_chat_template(recipe, where)  # else the trainer finds out on the booted machine
    if recipe.adapter in ("lora", "qlora") and recipe.lora_target_modules is None and shape.n_attention_layers == 0:
        # else PEFT fails on the booted machine
        raise RecipeError(f"{where}: lora_target_modules: {recipe.base_model} has no attention layers, so LoRA's default "
                          "(the attention projections) adapts nothing: list the linear modules to adapt (Mamba: "
                          "[in_proj, x_proj]; PEFT refuses its out_proj, so all-linear fails too)")
    if getattr(recipe, "sample_packing", False) and shape.model_type in PACKING_LEAKS:
        notes.append(f"sample_packing: {shape.model_type} models let packed samples see each other in transformers, "
                     "so the trainer turns packing off and trains on padded rows (slower; each sample sees only itself)")
    setup = setup_from_recipe(recipe)
    memory = estimate_memory(shape, setup)
    params = shape.params
    min_world = (spec.count_min if spec else 1) * res.nodes
    vram = memory.per_gpu_gb(min_world) if memory else None

    # Work: max_steps fixes steps (tokens grow with the world size); epochs fix tokens.
    tokens_per_step = recipe.sequence_len * recipe.micro_batch_size * recipe.gradient_accumulation_steps
    ds_bytes = _dataset_bytes(recipe, base_dir)
    if ds_bytes is None:
        dataset_tokens = float(est["default_dataset_tokens"])
        source = f"dataset size unknown at plan time: {dataset_tokens / 1e6:g}M tokens per epoch assumed"
        ds_bytes_for_io = dataset_tokens * float(est["bytes_per_token"])
    else:
        dataset_tokens = ds_bytes / float(est["bytes_per_token"])
        source = f"local dataset files, {ds_bytes / 1e6:.1f} MB ~ {dataset_tokens / 1e6:.2f}M tokens per epoch"
        ds_bytes_for_io = ds_bytes
    if recipe.max_steps:
        source = f"max_steps {recipe.max_steps} x {tokens_per_step} tokens per step per GPU"
    epochs = float(recipe.num_epochs or 1.0)

    builtin = recipe.base_model.startswith("builtin:")
    download = 0.0 if builtin else params * 2.0  # bf16 safetensors
    if recipe.adapter == "full" or memory is None:
        ckpt = params * 2.0
    else:
        ckpt = memory.trainable_params * 2.0

    host_ram, host_why = _host_need(params, memory, res.nodes)
    disk_gb, disk_why = disk_need(download_bytes=download, dataset_bytes=ds_bytes_for_io, checkpoint_bytes=ckpt,
                                  memory=memory, keep=recipe.checkpoint.keep, nodes=res.nodes)
    providers = tuple(res.providers)
    autostop = recipe.autostop
    needs_stop = autostop.action == "stop" and "action" in getattr(autostop, "model_fields_set", set())
    return Need(
        gpu=spec, gpu_text=str(spec) if spec else None, nodes=res.nodes, vram_gb=vram, cuda_min=res.cuda,
        nvme=res.disk == "nvme", regions=tuple(res.regions), spot=res.spot, max_price=res.max_price,
        providers=providers, needs_stop=needs_stop, adapter=recipe.adapter, model=recipe.base_model,
        params=params, shape=shape, memory=memory, max_steps=recipe.max_steps,
        tokens_per_step_per_gpu=tokens_per_step, dataset_tokens=dataset_tokens, epochs=epochs,
        tokens_source=source, dataset_bytes=ds_bytes_for_io, download_bytes=download, checkpoint_bytes=ckpt,
        checkpoint_uri=recipe.checkpoint.uri, gradient_checkpointing=setup.gradient_checkpointing or recipe.adapter == "qlora",
        host_ram_gb=host_ram, host_ram_per_gpu_gb=HOST_PER_GPU_GB, host_cpus_per_gpu=HOST_CPUS_PER_GPU,
        host_why=host_why, disk_gb=disk_gb, disk_why=disk_why, autostop_action=autostop.action,
        notes=tuple(notes),
    )


def fmt_gb(x: float) -> str:
    return f"{x:.1f} GB" if x < 100 else f"{math.ceil(x)} GB"


__all__ = ["need_from_recipe", "GIB"]
