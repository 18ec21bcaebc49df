"""Per-GPU memory estimate of a fine-tuning run, from the model's shape and the recipe.

    total = (weights + trainable copies + grads + optimiser states + activations) x (1 + allocator overhead)
            + CUDA context

- weights: 4-bit NF4 = 0.5 byte/param + quantisation constants (double quant: ~0.0159 byte/param) for the
  linear layers; embeddings, norms and lm_head stay bf16 (bitsandbytes does not quantise them). bf16 = 2.
- trainable params: LoRA A/B matrices (r x (in + out) per targeted module per layer, fp32) plus any
  `lora_modules_to_save`; for a full fine-tune, every param.
- grads: 2 bytes (bf16) for full, 4 (fp32) for adapters; optimiser states per configs/planner.yaml
  (AdamW 8, with fp32 master 12, 8-bit/paged 8-bit 2).
- activations: per token per layer, with gradient checkpointing only each layer's input (2h bytes) is kept
  plus one layer being recomputed; without it every layer's ~2(6h + 2kv + 5i) bytes; plus the logits
  (bf16 + fp32 upcast + softmax, ~10 bytes per token per vocab entry). QLoRA always checkpoints (the trainer
  turns it on, as Axolotl does).
- ZeRO (a DeepSpeed JSON with `zero_optimization.stage`): stage >= 1 shards optimiser states over the data
  parallel world, >= 2 the grads, 3 the weights; `offload_optimizer`/`offload_param` move them to CPU RAM.

All sizes are GiB (2**30 bytes), the unit GPU memory is sold in. Model shapes come from a local
``config.json`` (when `base_model` is a directory), else the bundled `MODEL_SHAPES` table, else a size
parsed from the name ("...-8B") scaled like Llama; `model_shape` returns None when none of these works.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = float(2**30)
_NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)  # 4-bit + 8-bit absmax per 64 + fp32 per 256 absmax blocks


@dataclass(frozen=True)
class ModelShape:
    """The few config.json numbers the estimate needs (Llama-family decoder)."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied_embeddings: bool = False
    head_dim: int | None = None

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def module_dims(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each linear module in one layer, by its HF name."""
        h, i, q, kv = self.hidden, self.intermediate, self.heads * self.hd, self.kv_heads * self.hd
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    @property
    def linear_params(self) -> int:
        return self.layers * sum(a * b for a, b in self.module_dims().values())

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        norms = self.layers * 2 * self.hidden + self.hidden
        return self.linear_params + self.embedding_params + norms


def _shape(name, h, i, layers, heads, kv, vocab, tied=False, head_dim=None) -> ModelShape:
    return ModelShape(name, h, i, layers, heads, kv, vocab, tied, head_dim)


# Bundled shapes (from each model's config.json on the Hugging Face Hub), keyed by a normalised name:
# lower case, organisation dropped, "-hf", "-instruct", "-chat", "-it" suffixes dropped.
MODEL_SHAPES: dict[str, ModelShape] = {s.name: s for s in (
    _shape("builtin:tiny-llama", 128, 256, 2, 4, 2, 1024),
    _shape("meta-llama-3-8b", 4096, 14336, 32, 32, 8, 128256),
    _shape("meta-llama-3-70b", 8192, 28672, 80, 64, 8, 128256),
    _shape("llama-3.1-8b", 4096, 14336, 32, 32, 8, 128256),
    _shape("llama-3.1-70b", 8192, 28672, 80, 64, 8, 128256),
    _shape("llama-3.2-1b", 2048, 8192, 16, 32, 8, 128256, tied=True, head_dim=64),
    _shape("llama-3.2-3b", 3072, 8192, 28, 24, 8, 128256, tied=True),
    _shape("llama-2-7b", 4096, 11008, 32, 32, 32, 32000),
    _shape("llama-2-13b", 5120, 13824, 40, 40, 40, 32000),
    _shape("llama-2-70b", 8192, 28672, 80, 64, 8, 32000),
    _shape("tinyllama-1.1b-chat-v1.0", 2048, 5632, 22, 32, 4, 32000),
    _shape("mistral-7b-v0.1", 4096, 14336, 32, 32, 8, 32000),
    _shape("mistral-7b-v0.3", 4096, 14336, 32, 32, 8, 32768),
    _shape("qwen2-7b", 3584, 18944, 28, 28, 4, 152064),
    _shape("qwen2.5-0.5b", 896, 4864, 24, 14, 2, 151936, tied=True),
    _shape("qwen2.5-1.5b", 1536, 8960, 28, 12, 2, 151936, tied=True),
    _shape("qwen2.5-7b", 3584, 18944, 28, 28, 4, 152064),
    _shape("qwen2.5-14b", 5120, 13824, 48, 40, 8, 152064),
    _shape("qwen2.5-32b", 5120, 27648, 64, 40, 8, 152064),
    _shape("qwen2.5-72b", 8192, 29568, 80, 64, 8, 152064),
    _shape("phi-3-mini-4k", 3072, 8192, 32, 32, 32, 32064),
    _shape("phi-3-mini-128k", 3072, 8192, 32, 32, 32, 32064),
    _shape("gemma-2-9b", 3584, 14336, 42, 16, 8, 256000, tied=True, head_dim=256),
    _shape("gemma-7b", 3072, 24576, 28, 16, 16, 256000, tied=True, head_dim=256),
)}
_ALIASES = {
    "llama-3-8b": "meta-llama-3-8b", "meta-llama-3.1-8b": "llama-3.1-8b", "llama-3-70b": "meta-llama-3-70b",
    "meta-llama-3.1-70b": "llama-3.1-70b", "mistral-7b": "mistral-7b-v0.1", "tinyllama-1.1b": "tinyllama-1.1b-chat-v1.0",
    "phi-3-mini": "phi-3-mini-4k", "qwen2-7b": "qwen2-7b", "llama-3.1-8b": "llama-3.1-8b",
}
_SUFFIXES = re.compile(r"(-hf|-instruct|-chat|-it|-base)+$")


def _normalise(base_model: str) -> str:
    name = base_model.strip().rstrip("/").lower()
    if name.startswith("builtin:"):
        return name
    name = name.split("/")[-1]
    return _SUFFIXES.sub("", name)


def shape_from_config(config: Mapping[str, Any], name: str = "config.json") -> ModelShape:
    """A `ModelShape` from a Hugging Face ``config.json`` mapping."""
    cfg = dict(config.get("text_config") or config)  # multimodal configs nest the LM
    h = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    return ModelShape(
        name=name, hidden=h, intermediate=int(cfg.get("intermediate_size") or 4 * h),
        layers=int(cfg["num_hidden_layers"]), heads=heads,
        kv_heads=int(cfg.get("num_key_value_heads") or heads), vocab=int(cfg["vocab_size"]),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)), head_dim=cfg.get("head_dim"),
    )


def model_shape(base_model: str, base_dir: Path | None = None) -> ModelShape | None:
    """The shape of `base_model`: a local dir's config.json, the bundled table, or a Llama-like shape scaled
    to a size in the name ("foo-8b"); None when unknown."""
    path_text = base_model[len("file://"):] if base_model.startswith("file://") else base_model
    if "://" not in path_text and not base_model.startswith("builtin:"):
        path = Path(path_text).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        cfg = path / "config.json"
        if cfg.is_file():
            try:
                return shape_from_config(json.loads(cfg.read_text(encoding="utf-8")), name=str(path))
            except (ValueError, KeyError, TypeError):
                return None
    key = _normalise(base_model)
    key = _ALIASES.get(key, key)
    if key in MODEL_SHAPES:
        return MODEL_SHAPES[key]
    if m := re.search(r"(?:^|[-_.])(\d+(?:\.\d+)?)b(?:$|[-_.])", key):
        return _llama_like(float(m.group(1)) * 1e9, key)
    return None


def _llama_like(params: float, name: str) -> ModelShape:
    """The bundled Llama shape closest in size (the estimate scales with params far more than with layout)."""
    llamas = [MODEL_SHAPES[k] for k in ("llama-3.2-1b", "llama-3.2-3b", "meta-llama-3-8b", "llama-2-13b",
                                        "qwen2.5-32b", "meta-llama-3-70b")]
    best = min(llamas, key=lambda s: abs(s.params - params))
    return ModelShape(f"{name} (~{best.name} shape)", best.hidden, best.intermediate, best.layers, best.heads,
                      best.kv_heads, best.vocab, best.tied_embeddings, best.head_dim)


@dataclass(frozen=True)
class TrainSetup:
    """What the memory and time estimates need from a recipe."""

    adapter: str = "lora"  # qlora | lora | full
    sequence_len: int = 2048
    micro_batch_size: int = 1
    gradient_checkpointing: bool = False
    lora_r: int = 8
    lora_target_modules: tuple[str, ...] | None = None  # None = attention projections
    lora_modules_to_save: tuple[str, ...] = ()
    optimizer: str | None = None  # None = planner.yaml's default for the adapter
    zero_stage: int = 0
    offload_optimizer: bool = False
    offload_param: bool = False
    load_in_8bit: bool = False  # lora on an 8-bit (LLM.int8) base: 1 byte per linear weight


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU memory components in GiB at a data-parallel world size of 1 (`per_gpu_gb` shards them)."""

    shape: ModelShape
    setup: TrainSetup
    params: int
    trainable_params: int
    weights_gb: float
    trainable_gb: float  # fp32 copies of adapter weights (0 for full: they are the weights)
    grads_gb: float
    optimizer_gb: float
    activations_gb: float
    context_gb: float
    overhead: float
    optimizer: str
    parts: Mapping[str, float] = field(default_factory=dict)

    def per_gpu_gb(self, world_size: int = 1) -> float:
        """GiB one GPU needs when the job runs data-parallel on `world_size` GPUs (ZeRO shards per stage)."""
        s, n = self.setup, max(1, world_size)
        weights = self.weights_gb / n if s.zero_stage >= 3 else self.weights_gb
        if s.offload_param and s.zero_stage >= 3:
            weights = self.weights_gb / self.shape.layers  # one layer gathered at a time
        grads = self.grads_gb / n if s.zero_stage >= 2 else self.grads_gb
        opt = self.optimizer_gb / n if s.zero_stage >= 1 else self.optimizer_gb
        if s.offload_optimizer and s.zero_stage >= 1:
            opt = 0.0
        body = weights + self.trainable_gb + grads + opt + self.activations_gb
        return body * (1 + self.overhead) + self.context_gb


LORA_DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def lora_trainable_params(shape: ModelShape, r: int, targets: tuple[str, ...] | None,
                          modules_to_save: tuple[str, ...] = ()) -> int:
    dims = shape.module_dims()
    if targets is None:
        targets = LORA_DEFAULT_TARGETS
    if any(t in ("all-linear", "all_linear") for t in targets):
        targets = tuple(dims)
    per_layer = sum(r * (dims[t][0] + dims[t][1]) for t in targets if t in dims)
    extra = 0
    for m in modules_to_save:
        if m in ("embed_tokens", "lm_head"):
            extra += shape.vocab * shape.hidden
    if shape.tied_embeddings and {"embed_tokens", "lm_head"} <= set(modules_to_save):
        extra -= shape.vocab * shape.hidden
    return shape.layers * per_layer + extra


def estimate_memory(shape: ModelShape, setup: TrainSetup, settings: Mapping[str, Any] | None = None) -> MemoryEstimate:
    """The per-GPU memory estimate (see the module docstring for the model)."""
    if settings is None:
        from .settings import planner_settings

        settings = planner_settings()["memory"]
    optimizer = setup.optimizer or settings["optimizer"][setup.adapter]
    opt_bytes = float(settings["optimizer_bytes"].get(optimizer, 8))
    P = shape.params
    other = P - shape.linear_params  # embeddings, lm_head, norms: never quantised
    if setup.adapter == "qlora":
        weights = shape.linear_params * _NF4_BYTES + other * 2
    elif setup.load_in_8bit:
        weights = shape.linear_params * 1.0 + other * 2
    else:
        weights = P * 2.0
    if setup.adapter == "full":
        trainable = P
        trainable_copy, grads = 0.0, P * 2.0
    else:
        trainable = lora_trainable_params(shape, setup.lora_r, setup.lora_target_modules, setup.lora_modules_to_save)
        trainable_copy, grads = trainable * 4.0, trainable * 4.0
    optimizer_b = trainable * opt_bytes

    h, i, L = shape.hidden, shape.intermediate, shape.layers
    kv = shape.kv_heads * shape.hd
    tokens = setup.sequence_len * setup.micro_batch_size
    per_layer_token = 2.0 * (6 * h + 2 * kv + 5 * i)
    if setup.gradient_checkpointing or setup.adapter == "qlora":
        acts = tokens * (L * 2 * h + per_layer_token)
    else:
        acts = tokens * L * per_layer_token
    logits = tokens * shape.vocab * 10.0
    activations = acts + logits
    parts = {"weights": weights / GIB, "trainable": trainable_copy / GIB, "grads": grads / GIB,
             "optimizer": optimizer_b / GIB, "activations": acts / GIB, "logits": logits / GIB}
    return MemoryEstimate(
        shape=shape, setup=setup, params=P, trainable_params=trainable,
        weights_gb=weights / GIB, trainable_gb=trainable_copy / GIB, grads_gb=grads / GIB,
        optimizer_gb=optimizer_b / GIB, activations_gb=activations / GIB,
        context_gb=float(settings["cuda_context_gb"]), overhead=float(settings["allocator_overhead"]),
        optimizer=optimizer, parts=parts,
    )


def read_deepspeed(path: str | None, base_dir: Path | None = None) -> tuple[int, bool, bool]:
    """(zero stage, offload optimizer, offload params) from a DeepSpeed JSON; a missing file counts as
    the stage its name says ("zero3-offload.json") so plans work before the file exists."""
    if not path:
        return 0, False, False
    p = Path(path)
    if not p.is_absolute() and base_dir is not None and not p.exists():
        p = base_dir / p
    try:
        cfg = json.loads(p.read_text(encoding="utf-8")).get("zero_optimization") or {}
        stage = int(cfg.get("stage", 0))
        off_opt = (cfg.get("offload_optimizer") or {}).get("device", "none") not in ("none", None)
        off_par = (cfg.get("offload_param") or {}).get("device", "none") not in ("none", None)
        return stage, off_opt, off_par
    except (OSError, ValueError, AttributeError, TypeError):
        name = p.name.lower()
        m = re.search(r"zero_?(\d)", name)
        offload = "offload" in name
        return (int(m.group(1)) if m else 0), offload, offload and "3" in (m.group(1) if m else "")


def setup_from_recipe(recipe: Any) -> TrainSetup:
    """The `TrainSetup` of a `launchpad.recipe.Recipe` (an `optimizer` field is used when the recipe has one)."""
    src = getattr(recipe, "source_path", None)
    base_dir = Path(src).parent if src else None
    stage, off_opt, off_par = read_deepspeed(recipe.deepspeed, base_dir)
    targets = recipe.lora_target_modules
    return TrainSetup(
        adapter=recipe.adapter, sequence_len=recipe.sequence_len, micro_batch_size=recipe.micro_batch_size,
        gradient_checkpointing=bool(recipe.gradient_checkpointing), lora_r=recipe.lora_r,
        lora_target_modules=tuple(targets) if targets else None,
        lora_modules_to_save=tuple(recipe.lora_modules_to_save or ()),
        optimizer=getattr(recipe, "optimizer", None), zero_stage=stage,
        offload_optimizer=off_opt, offload_param=off_par, load_in_8bit=bool(getattr(recipe, "load_in_8bit", False)),
    )
