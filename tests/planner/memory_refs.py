"""The calibration table (tests/data/memory_references.yaml) against the memory estimate.

Each reference is a published measurement with its settings (see the file's header). `compare` turns the
settings into a `TrainSetup`, estimates the run and returns the ratio estimate / measured, like for like:
a `max_memory_allocated` figure is compared with the estimate's allocated peak, `max_memory_reserved` with
that plus the allocator's overhead, nvidia-smi (or an unknown measure) with what the card must have.
Run it as a script for the table: python tests/planner/memory_refs.py
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from launchpad.planner.memory import TrainSetup, estimate_memory
from launchpad.planner.shapes import ModelShape, resolve_shape

REFERENCES = Path(__file__).resolve().parents[1] / "data" / "memory_references.yaml"
LOW, HIGH, FLOOR = 0.8, 1.25, 0.7
#: frameworks whose QLoRA path runs PEFT's prepare_model_for_kbit_training (non-quantised weights in fp32)
_PEFT_FRAMEWORKS = {"peft", "hf-trainer", "trl", "axolotl", "llama-factory", "other", "deepspeed"}
_OPTIMIZERS = {None: "adamw_torch", "adamw": "adamw_torch", "adamw_torch": "adamw_torch", "bf16_adamw": "adamw_torch",
               "adamw_fused": "adamw_torch_fused", "adamw_8bit": "adamw_8bit", "adamw_bnb_8bit": "adamw_8bit",
               "paged_adamw_8bit": "paged_adamw_8bit", "paged_adamw_32bit": "paged_adamw_32bit",
               "sgd": "sgd", "adafactor": "adafactor", "adamw_4bit": "adamw_torch_4bit"}


@dataclass(frozen=True)
class Comparison:
    ref: dict[str, Any]
    estimate_gb: float
    measured_gb: float

    @property
    def ratio(self) -> float:
        return self.estimate_gb / self.measured_gb

    @property
    def family(self) -> str:
        return str(self.ref["family"])

    @property
    def within(self) -> bool:
        return LOW <= self.ratio <= HIGH


def load_references(path: Path = REFERENCES) -> list[dict[str, Any]]:
    return list(yaml.safe_load(path.read_text(encoding="utf-8"))["references"])


def _count(value: Any) -> int | None:
    return None if value is None else int(float(value))


def setup_of(ref: dict[str, Any]) -> TrainSetup:
    precision = str(ref.get("precision") or "bf16-mixed")
    framework = str(ref.get("framework") or "other")
    targets = ref.get("lora_target_modules")
    if isinstance(targets, str):
        targets = [targets]
    if targets and framework == "litgpt":  # LitGPT's q/k/v switches adapt one fused linear, `attn`
        targets = ["attn"] * any(t in ("q", "k", "v") for t in targets) + [t for t in targets if t not in ("q", "k", "v")]
    zero = int(ref.get("zero_stage") or 0)
    flash = ref.get("flash_attention")
    return TrainSetup(
        adapter=ref["adapter"], sequence_len=int(ref["sequence_len"]), micro_batch_size=int(ref["micro_batch_size"]),
        gradient_checkpointing=bool(ref.get("gradient_checkpointing")), lora_r=int(ref.get("lora_r") or 8),
        lora_target_modules=tuple(targets) if targets else None,
        lora_modules_to_save=tuple(ref.get("lora_modules_to_save") or ()),
        lora_dropout=float(ref.get("lora_dropout", 0.0 if framework in ("torchtune", "unsloth") else 0.05)),
        optimizer=_OPTIMIZERS[ref.get("optimizer")], zero_stage=zero,
        offload_optimizer=bool(ref.get("offload_optimizer")), offload_param=bool(ref.get("offload_param")),
        load_in_8bit=bool(ref.get("load_in_8bit")),
        precision="fp32" if precision == "fp32" else precision.split("-")[0],
        fp32_master_weights=not precision.endswith("pure"),
        deepspeed=framework == "deepspeed" or bool(ref.get("deepspeed")) or (
            zero > 0 and "fsdp" not in (str(ref["id"]) + str(ref.get("notes"))).lower()),
        attention="eager" if flash is False else "flash", loss=str(ref.get("loss") or "standard"),
        # PEFT's kbit preparation upcasts embeddings and head to fp32, except on GPTQ bases; Axolotl casts
        # them back to 16-bit when FlashAttention is on (FlashAttention needs 16-bit inputs); TRL skips the preparation
        # for a 4-bit model that FSDP or ZeRO-3 shards (its Params4bit load on cpu/meta: `sharded_qlora`)
        kbit_upcast=(framework in _PEFT_FRAMEWORKS and ref.get("quantization") != "gptq"
                     and not (framework == "axolotl" and flash is True) and not ref.get("sharded_qlora")),
        optimizer_in_backward=bool(ref.get("optimizer_in_backward")),
        packing=bool(ref.get("packing") or ref.get("fixed_shape")),
        gradient_accumulation_steps=int(ref.get("gradient_accumulation_steps") or 1),
        frozen_fp32=ref["adapter"] == "lora" and framework == "litgpt" and precision.endswith("mixed"),
        compiled=bool(ref.get("compile")), activation_offload=bool(ref.get("activation_offload")),
        logits_upcast=bool(ref.get("logits_upcast", True)),
        litgpt_attention=framework == "litgpt",
        litgpt_lora_qkv=tuple(t for t in (ref.get("lora_target_modules") or ()) if t in ("q", "k", "v"))
        if framework == "litgpt" else (),
        foreach=ref.get("optimizer_foreach", True), fsdp_embeddings_apart=bool(ref.get("fsdp_custom_sharded_layers")),
        # LitGPT accumulates under Fabric's no_backward_sync, which is FSDP's no_sync (finetune/*.py at 2685705)
        fsdp_no_sync=framework == "litgpt",
        # DeepSpeed's buckets where the run's config is known (absent: "auto", as the HF Trainer fills it)
        reduce_bucket_size=_count(ref.get("reduce_bucket_size")), prefetch_bucket_size=_count(ref.get("prefetch_bucket_size")),
        overlap_comm=ref.get("overlap_comm"),
        fused_activation=framework == "litgpt",  # LitGPT's MLPs call F.gelu (one kernel) for every GELU variant
    )


def shape_of(ref: dict[str, Any]) -> ModelShape:
    """The model as the reference's framework builds it. LitGPT's `GPT` always has its own `lm_head`: its
    checkpoint converter copies a tied model's embedding into it, and its fine-tuning scripts refuse
    `tie_embeddings` (litgpt/model.py, scripts/convert_hf_checkpoint.py, finetune/*.py at 2685705), so
    Gemma and Llama-3.2 carry a second vocabulary-sized matrix there."""
    shape = resolve_shape(ref["model"], model_config=ref.get("model_config"))
    if ref.get("framework") == "litgpt" and shape.tied_embeddings:
        shape = replace(shape, tied_embeddings=False)
    return shape


def compare(ref: dict[str, Any]) -> Comparison:
    shape = shape_of(ref)
    est = estimate_memory(shape, setup_of(ref))
    world = int(ref.get("gpus") or 1)
    measure = ref.get("measure") or "unknown"
    if measure == "max_memory_allocated":
        gb = est.peak_allocated_gb(world)
    elif measure == "max_memory_reserved":
        gb = est.reserved_gb(world)
    else:
        gb = est.per_gpu_gb(world)
    measured = float(ref["measured_gb"])
    if ref.get("unit") == "GB-decimal":  # a figure in 10**9 bytes; the estimate is in GiB
        measured = measured * 1e9 / 2**30
    return Comparison(ref, gb, measured)


_STATES = ("weights", "trainable", "grads", "master weights", "fp32 grads", "optimizer")


def model_states_gb(ref: dict[str, Any]) -> float:
    """GiB per GPU of what the settings must hold whatever the activations: weights, grads, master weights
    and optimiser states (sharded and offloaded as stated). A measured peak below it is a wrong figure or
    wrong settings."""
    shape = shape_of(ref)
    est = estimate_memory(shape, setup_of(ref))
    world = int(ref.get("gpus") or 1)
    return sum(est.term_gb(t, world) for t in est.terms if t.name in _STATES)


def table(comparisons: list[Comparison]) -> str:
    by_family: dict[str, list[Comparison]] = defaultdict(list)
    for c in comparisons:
        by_family[c.family].append(c)
    lines = [f"{'family':<14} {'within':>7} {'share':>6} {'median':>7} {'min':>6} {'max':>6}"]
    for fam, rows in sorted(by_family.items()):
        ratios = sorted(r.ratio for r in rows)
        within = sum(r.within for r in rows)
        lines.append(f"{fam:<14} {within:>3}/{len(rows):<3} {within / len(rows):>6.1%} {ratios[len(ratios) // 2]:>7.2f} "
                     f"{ratios[0]:>6.2f} {ratios[-1]:>6.2f}")
    within = sum(c.within for c in comparisons)
    lines.append(f"{'all':<14} {within:>3}/{len(comparisons):<3} {within / max(1, len(comparisons)):>6.1%}")
    return "\n".join(lines)


def main() -> None:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the bundled table: as the tests run it
    refs = load_references()
    peaks = [compare(r) for r in refs if r.get("kind", "peak") == "peak" and not r.get("exclude")]
    for c in sorted(peaks, key=lambda c: c.ratio):
        flag = " " if c.within else "*"
        print(f"{flag} {c.ratio:5.2f}  est {c.estimate_gb:6.1f}  meas {c.measured_gb:6.1f}  {c.ref['id']}")
    print(table(peaks))
    for r in refs:
        if r.get("kind") in ("fits", "oom") and not r.get("exclude"):
            c = compare(r)
            held = c.estimate_gb <= c.measured_gb if r["kind"] == "fits" else c.estimate_gb > c.measured_gb
            print(f"{' ' if held else '*'} {r['kind']:<4} est {c.estimate_gb:6.1f} vs card {c.measured_gb:6.1f}  {r['id']}")


if __name__ == "__main__":
    main()
