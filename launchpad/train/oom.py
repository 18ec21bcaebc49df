"""Out of memory: recognise it (GPU or CPU) and say, in one line, what to change in the recipe.

The advice follows the order that costs the least: halve the micro batch (doubling gradient
accumulation keeps the effective batch and the learning dynamics), then gradient checkpointing
(~30% slower, activations mostly gone), then QLoRA (4-bit base weights), then ZeRO-3 with CPU offload
for a full fine-tune, and finally a shorter sequence or a bigger GPU.
"""

from __future__ import annotations

from ..errors import LaunchpadError


class OutOfMemory(LaunchpadError):
    """Training ran out of GPU or CPU memory; the message says what to try next."""


_CPU_MARKERS = ("can't allocate memory", "cannot allocate memory", "out of memory", "std::bad_alloc")


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return True
    except ImportError:
        pass
    return isinstance(exc, RuntimeError) and any(m in str(exc) for m in _CPU_MARKERS)


def oom_advice(recipe, *, on_gpu: bool) -> str:
    """One line: what ran out, and the next smaller settings to try."""
    tries: list[str] = []
    mb, ga = recipe.micro_batch_size, recipe.gradient_accumulation_steps
    if mb > 1:
        smaller = mb // 2
        tries.append(f"micro_batch_size: {smaller} with gradient_accumulation_steps: {ga * mb // smaller} "
                     "(same effective batch)")
    if not recipe.gradient_checkpointing and recipe.adapter != "qlora":
        tries.append("gradient_checkpointing: true")
    if recipe.adapter != "qlora":
        tries.append("adapter: qlora")
    if recipe.adapter == "full" and "offload" not in (recipe.deepspeed or ""):
        tries.append("deepspeed: zero3-offload")
    if not tries:
        tries.append(f"a shorter sequence_len than {recipe.sequence_len} or a GPU with more memory")
    where = "GPU" if on_gpu else "CPU"
    return (f"out of {where} memory at micro_batch_size {mb}, sequence_len {recipe.sequence_len}: try "
            + "; or ".join(tries) + " (`launchpad plan RECIPE --explain` shows the estimate)")
