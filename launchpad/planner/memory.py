"""Per-GPU memory estimate of a fine-tuning run, built term by term from what the GPU really holds.

    peak = weights + trainable copies + grads + master weights + optimiser states + ZeRO buffers
           + activations + logits                                    (= what torch allocates at the peak)
    GPU  = peak x (1 + allocator overhead) + CUDA context                (what the card must have)

Bytes per parameter, by run (P = parameters, T = trainable ones):
  - qlora: linear weights NF4 (0.5 + double-quant constants); everything else (embeddings, lm_head,
    norms) fp32, because PEFT's prepare_model_for_kbit_training upcasts it (`kbit_upcast`), else 16-bit.
    8-bit base (load_in_8bit): 1 byte per linear weight. lora: 16-bit base (2).
  - adapters: fp32 LoRA weights, fp32 grads, optimiser states on T (16-bit in a pure 16-bit run). Targets
    may be spelt as other architectures and frameworks do (c_attn, W_pack, query_key_value, LitGPT's q/v,
    torchtune's mlp/output): `adapted_modules` maps them onto the projections, fused ones as one module.
  - full, three precisions (the ZeRO paper's "2 + 2 + 12" is the DeepSpeed one):
      fp32 params under autocast (HF Trainer, launchpad's default): 4 weights + 4 grads (+ 2 for the
        16-bit copies autocast keeps for the backward pass, when activations are not checkpointed);
      DeepSpeed bf16/fp16: 2 weights + 2 grads + 4 fp32 master + fp32 grad partition (4/N) in the optimiser;
      pure bf16 (`fp32_master_weights: false`, Axolotl/torchtune style): 2 + 2, states in bf16.
  - optimiser states: AdamW 2 moments in the parameters' dtype (8 bytes fp32, 4 bf16), 8-bit AdamW 2,
    4-bit 1, SGD 0, Adafactor ~0.1 (factored). Paged optimisers live in CUDA unified memory that pages
    out to the host when the GPU runs short, so they do not count against the card; same for states
    updated in the backward pass (`optimizer_in_backward`: no full set of grads either). torch's default
    multi-tensor ("foreach") AdamW step allocates the square roots of all second moments beside the grads
    (`adamw_torch`; not the fused kernel, bitsandbytes or DeepSpeed, which step in place).
  - ZeRO shards (stage >= 1) states + master, (>= 2) grads, (3) weights over the data-parallel world;
    stage 3 gathers the largest module (weights + its grads) plus its prefetch bucket (under FSDP its root unit,
    the embeddings and head together, which it keeps gathered through the backward, and two layers: the current
    one and the one its backward prefetch fetches, `_fsdp_working_set`), and under DeepSpeed
    keeps whole the last layers that the trace uses again within `stage3_max_reuse_distance` parameters
    (all of a small model); offload moves the
    states (and with offload_param the weights) to host RAM, leaving the gathered working set.
  - DeepSpeed's gradient bucket at the JSON's reduce_bucket_size (two under ZeRO-1/2 with overlap_comm) and
    ZeRO-3's prefetch bucket: allocated whatever the model's size (`_deepspeed_buckets`).
  - plain data parallelism (DDP, no ZeRO/FSDP) on more than one GPU: its all-reduce buckets, a second copy
    of the grads.

Activations and logits: launchpad/planner/activations.py (what autograd saves per layer, and why).
Packing changes nothing in the tensors at the peak (the worst micro-batch is full-length rows either way), but
fixed-shape batches let the caching allocator reuse its blocks; rows of varying length leave holes among the
activations' blocks, another `fragmentation_unpacked` share of them (configs/planner.yaml).

All sizes are GiB (2**30 bytes), the unit GPU memory is sold in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .activations import activation_terms
from .deepspeed_memory import DEEPSPEED_REUSE_DISTANCE, DeepSpeedMemory, read_deepspeed
from .lora_targets import (
    LORA_DEFAULT_TARGETS,
    adapted_modules,
    adapts_head,
    lora_trainable_params,
    targets_of_pattern,
)
from .shapes import ModelShape, UnknownModel, resolve_shape, shape_from_config, try_shape

GIB = float(2**30)
_NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)  # 4-bit + 8-bit absmax per 64 + fp32 per 256 absmax blocks
_OPT_BYTES_FP32 = {"adamw": 8.0, "adamw_8bit": 2.0, "adamw_4bit": 1.0, "sgd": 0.0, "adafactor": 0.1}


@dataclass(frozen=True)
class TrainSetup:
    """What the memory and time estimates need from a recipe (or from a published run's settings)."""

    adapter: str = "lora"  # qlora | lora | full
    sequence_len: int = 2048
    micro_batch_size: int = 1
    gradient_checkpointing: bool = False
    lora_r: int = 8
    lora_target_modules: tuple[str, ...] | None = None  # None = attention projections
    lora_modules_to_save: tuple[str, ...] = ()
    lora_dropout: float = 0.05
    optimizer: str | None = None  # None = planner.yaml's default for the adapter
    zero_stage: int = 0
    offload_optimizer: bool = False
    offload_param: bool = False
    load_in_8bit: bool = False  # lora on an 8-bit (LLM.int8) base: 1 byte per linear weight
    precision: str = "bf16"  # bf16 | fp16 | fp32: what activations and 16-bit weights are stored in
    fp32_master_weights: bool = True  # full: fp32 params (or DeepSpeed's fp32 master); False = pure bf16
    deepspeed: bool = False  # ZeRO through DeepSpeed (16-bit params + fp32 master in the optimiser)
    attention: str = "flash"  # flash | sdpa (memory-efficient kernels: linear in the sequence) | eager
    loss: str = "standard"  # standard | chunked (eager; c + c/8 where compiled) | fused | tiled (TRL: launchpad's trainer)
    kbit_upcast: bool = True  # PEFT's prepare_model_for_kbit_training casts non-quantised weights to fp32
    optimizer_in_backward: bool = False  # each param stepped as its grad arrives (torchtune)
    packing: bool = False
    gradient_accumulation_steps: int = 1  # > 1: grads live through the next forward pass
    frozen_fp32: bool = False  # lora: the frozen base kept in fp32 (LitGPT's bf16-mixed) instead of 16-bit
    compiled: bool = False  # torch.compile fuses the norm/MLP elementwise ops: fewer saved activations
    # False: the model's code scores its 16-bit logits as they are and nothing autocasts the loss (Qwen-1's
    # remote code under DeepSpeed's fp16/bf16 engine, where Accelerate turns autocast off): no fp32 copies
    logits_upcast: bool = True
    # LitGPT's own model code: one fused qkv linear, k and v kept at the query width by SDPA (expanded copies
    # under GQA; under MHA v is a view that keeps the whole fused output alive), and its LoRA pads the outputs
    # of the q/k/v switches that are on (`litgpt_lora_qkv`) to the fused width, keeping the pad's source
    litgpt_attention: bool = False
    litgpt_lora_qkv: tuple[str, ...] = ()
    activation_offload: bool = False  # checkpointed layer inputs moved to host RAM (torchtune)
    fused_activation: bool = False  # the MLP's activation is one kernel whatever config.json names (LitGPT)
    # DeepSpeed ZeRO-3 keeps a gathered parameter when the trace uses it again within this many parameters
    # (stage3_max_reuse_distance; DeepSpeed's default 1e9, launchpad's presets too, Axolotl's configs 0)
    reuse_distance: int = DEEPSPEED_REUSE_DISTANCE
    # DeepSpeed's gradient buckets, in elements (None: "auto", the model's hidden^2 and 0.9 hidden^2, as the HF
    # Trainer and Accelerate fill it in); overlap_comm None: DeepSpeed's default, on for ZeRO-3 only
    reduce_bucket_size: int | None = None
    prefetch_bucket_size: int | None = None
    overlap_comm: bool | None = None
    contiguous_gradients: bool = True
    # torch steps AdamW over all tensors at once (its default on GPU, "foreach"), with a temporary of the second
    # moments' size; one tensor at a time where the params are FSDP1 FlatParameters (use_orig_params false)
    foreach: bool = True
    # residual stream, norms and MLP in fp32 around 16-bit attention: launchpad's kbit runs (see setup_from_recipe)
    fp32_residual: bool = False
    # FSDP (zero_stage 3 without DeepSpeed) wraps the embedding and the head as units of their own (torchtune's
    # custom_sharded_layers); otherwise they sit in the root unit, which stays gathered through the backward
    fsdp_embeddings_apart: bool = False
    # gradient accumulation under FSDP's no_sync() (LitGPT's no_backward_sync, Accelerate's accumulate): each rank
    # keeps the whole model's grads, unsharded, until the micro-step that synchronises
    fsdp_no_sync: bool = False


@dataclass(frozen=True)
class Term:
    """One component of the estimate, for `plan --explain`: GiB at world size 1 and how it was computed."""

    name: str
    gb: float
    formula: str
    shard: int = 0  # ZeRO stage from which it is divided by the world size (0 = never)
    offload: str = ""  # "optimizer" / "param": moved to host RAM by that offload
    on_gpu: bool = True  # False: paged (CUDA unified memory spills to the host): it need not fit the card
    phase: str = "static"  # static: held throughout; forward: activations (freed as the backward pass runs);
    # backward: grads (built as activations are freed, dropped after the step unless accumulating); step: the
    # optimiser step's temporaries (beside the grads)
    data_parallel: bool = False  # held only when the run is data-parallel (world size > 1)


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-GPU memory of one run. `per_gpu_gb(world)` is what a GPU must have; `peak_allocated_gb(world)`
    what torch's allocator peaks at (comparable with `torch.cuda.max_memory_allocated`)."""

    shape: ModelShape
    setup: TrainSetup
    params: int
    trainable_params: int
    terms: tuple[Term, ...]
    context_gb: float
    overhead: float
    optimizer: str
    fragmentation: float = 0.0  # extra share of the activations' memory lost to holes (rows of varying length)

    @property
    def parts(self) -> dict[str, float]:
        """GiB of each term by name (at world size 1)."""
        return {t.name: t.gb for t in self.terms}

    def _get(self, name: str) -> float:
        return sum(t.gb for t in self.terms if t.name == name)

    @property
    def weights_gb(self) -> float:
        return self._get("weights")

    @property
    def optimizer_gb(self) -> float:
        """Optimiser states, wherever they live (a checkpoint holds them)."""
        return self._get("optimizer")

    @property
    def offloadable_gb(self) -> float:
        """What ZeRO's optimizer offload keeps in host RAM: states, fp32 master weights and grads."""
        return sum(t.gb for t in self.terms if t.offload == "optimizer")

    @property
    def grads_gb(self) -> float:
        return self._get("grads")

    @property
    def activations_gb(self) -> float:
        return self._get("activations") + self._get("logits")

    def term_gb(self, term: Term, world_size: int = 1) -> float:
        s, n = self.setup, max(1, world_size)
        if not term.on_gpu or (term.data_parallel and n == 1):
            return 0.0
        if term.offload == "optimizer" and s.offload_optimizer and s.zero_stage >= 1:
            return 0.0
        if term.offload == "param" and s.offload_param and s.zero_stage >= 3:
            return 0.0
        if term.shard and s.zero_stage >= term.shard:
            return term.gb / n
        return term.gb

    def _phases(self, world_size: int) -> dict[str, float]:
        by = {"static": 0.0, "forward": 0.0, "backward": 0.0, "step": 0.0}
        for t in self.terms:
            by[t.phase] += self.term_gb(t, world_size)
        return by

    def peak_allocated_gb(self, world_size: int = 1) -> float:
        """Held throughout + the larger of the forward peak (activations) and the grads the backward pass
        builds as it frees them, with the optimiser step's temporaries beside the grads; grads and activations
        both at once when grads accumulate over micro-batches."""
        by = self._phases(world_size)
        if self.setup.gradient_accumulation_steps > 1:
            return by["static"] + by["backward"] + max(by["forward"], by["step"])
        return by["static"] + max(by["forward"], by["backward"] + by["step"])

    def reserved_gb(self, world_size: int = 1) -> float:
        """What torch's caching allocator reserves: the peak plus its overhead, plus the holes that rows of
        varying length leave among the activations (weights and states are allocated once and do not)."""
        return (self.peak_allocated_gb(world_size) * (1 + self.overhead)
                + self.fragmentation * self._phases(world_size)["forward"])

    def per_gpu_gb(self, world_size: int = 1) -> float:
        """GiB one GPU needs when the job runs data-parallel on `world_size` GPUs (ZeRO shards per stage)."""
        return self.reserved_gb(world_size) + self.context_gb

    def explain(self, world_size: int = 1) -> list[str]:
        """One line per term: its GiB on one of `world_size` GPUs and the formula's inputs."""
        lines = []
        for t in self.terms:
            gb = self.term_gb(t, world_size)
            if t.gb < 0.005 or (t.data_parallel and world_size == 1):
                continue
            how = t.formula
            if not t.on_gpu:
                how += ", not counted"
            elif gb != t.gb:
                how += " (offloaded to host RAM)" if gb == 0 else f" / {world_size} GPUs (ZeRO-{self.setup.zero_stage})"
            lines.append(f"{t.name}: {gb:.2f} GB = {how}")
        return lines


def _optimizer_kind(name: str) -> tuple[str, bool]:
    """(state kind, paged) of an HF `optim` name."""
    paged = name.startswith("paged_")
    if "4bit" in name:
        return "adamw_4bit", paged
    if "8bit" in name:
        return "adamw_8bit", paged
    if name.startswith("sgd"):
        return "sgd", paged
    if name.startswith("adafactor"):
        return "adafactor", paged
    return "adamw", paged


def _reuse_term(shape: ModelShape, s: TrainSetup, weight_bytes: float) -> list[Term]:
    """ZeRO-3 does not release a gathered parameter that the trace uses again within `reuse_distance`
    parameters. At the turn from the forward to the backward pass the last layers are used again after
    twice the parameters behind them (their forward, then the backward in reverse) plus twice the head's:
    those within the distance stay whole on every GPU, up to the whole model when it is small."""
    head = shape.vocab * shape.hidden
    layer = (shape.params - shape.embedding_params) / max(1, shape.layers)
    budget = s.reuse_distance / 2 - head
    if budget <= 0 or layer <= 0:
        return []
    n = min(shape.layers, -int(-budget // layer))  # ceil: layer j from the end stays when 2(head + j layer) < D
    kept = n * layer
    return [Term("ZeRO-3 reused", kept * weight_bytes / GIB,
                 f"last {n} layers x {layer / 1e6:.0f}M x {weight_bytes:.3g} (used again within the reuse "
                 f"distance {s.reuse_distance:.0e})", phase="forward")]


def _frozen_weight_bytes(s: TrainSetup, c: float) -> float:
    """Bytes per parameter of a linear weight as ZeRO-3 / FSDP gather it: NF4, int8 or 16-bit."""
    return _NF4_BYTES if s.adapter == "qlora" else 1.0 if (s.adapter == "lora" and s.load_in_8bit) else c


def _fsdp_working_set(shape: ModelShape, s: TrainSetup, c: float) -> Term:
    """What FSDP holds unsharded at the backward pass's peak, with its default backward prefetch (BACKWARD_PRE:
    "the current set of parameters, next set of parameters, and current set of gradients", torch's FSDP docs;
    fully_shard prefetches the next module the same way): two decoder layers' weights as stored (NF4 under QLoRA)
    and, where the base trains, the current layer's grads; plus the root unit (embeddings and head), which FSDP
    does not reshard after the forward and whose grads build up through the whole backward pass. A frozen base
    has no grads. With the embeddings and the head wrapped apart (torchtune's custom_sharded_layers) the head's
    unit and the last layer's are the peak at the backward pass's start."""
    layer = shape.largest_layer_params
    train = 1.0 if s.adapter == "full" else 0.0
    wb = _frozen_weight_bytes(s, c)
    layers = layer * (2 * wb + train * c)
    how = f"2 layers x {layer / 1e6:.0f}M x {wb:.3g}" + (f" + 1 layer's grads x {c:g}" if train else "")
    if s.fsdp_embeddings_apart:
        head = shape.vocab * shape.hidden
        at_start = head * c * (1 + train) + layer * wb
        if at_start > layers:
            return Term("ZeRO-3 gathered", at_start / GIB, f"head {head / 1e6:.0f}M x {c:g}" + (" + its grads" if train
                        else "") + f" + 1 layer x {layer / 1e6:.0f}M x {wb:.3g} (FSDP, head unit apart)")
        return Term("ZeRO-3 gathered", layers / GIB, how + " (FSDP: this layer and the prefetched next)")
    root = shape.embedding_params
    return Term("ZeRO-3 gathered", (root * c * (1 + train) + layers) / GIB,
                f"root unit {root / 1e6:.0f}M x {c:g}" + (" + its grads" if train else "") + f" + {how} (FSDP: this layer"
                " and the prefetched next)")


def _deepspeed_buckets(shape: ModelShape, s: TrainSetup, c: float) -> list[Term]:
    """The buffers DeepSpeed's ZeRO optimiser allocates on the GPU, whatever the model's size (its stage3.py and
    stage_1_and_2.py): with contiguous_gradients (its default) a gradient bucket of reduce_bucket_size elements
    in the 16-bit dtype, two under ZeRO-1/2 when overlap_comm double-buffers it, held through the backward pass
    while the activations are; ZeRO-3 also prefetches up to stage3_prefetch_bucket_size parameters ahead.
    A JSON that leaves the sizes out gets DeepSpeed's 5e8 and 5e7 elements (~0.93 and ~0.09 GB in bf16); "auto"
    is the model's hidden^2 and 0.9 hidden^2."""
    h2 = shape.hidden ** 2
    reduce = s.reduce_bucket_size if s.reduce_bucket_size is not None else h2
    how_r = f"{reduce:.3g}" if s.reduce_bucket_size is not None else "auto h^2"
    if s.zero_stage >= 3:
        prefetch = s.prefetch_bucket_size if s.prefetch_bucket_size is not None else int(0.9 * h2)
        how_p = f"{prefetch:.3g}" if s.prefetch_bucket_size is not None else "auto 0.9 h^2"
        n = (reduce if s.contiguous_gradients else 0) + prefetch
        return [Term("ZeRO buckets", n * c / GIB, f"reduce bucket {how_r} + prefetch {how_p} elements x {c:g}")]
    if not s.contiguous_gradients:
        return []
    copies = 2 if s.overlap_comm else 1
    return [Term("ZeRO buckets", reduce * copies * c / GIB,
                 f"reduce bucket {how_r} elements x {copies} (overlap_comm {'on' if s.overlap_comm else 'off'}) x {c:g}")]


def estimate_memory(shape: ModelShape, setup: TrainSetup, settings: Mapping[str, Any] | None = None) -> MemoryEstimate:
    """The per-GPU memory estimate (see the module docstring for the model)."""
    if settings is None:
        from .settings import planner_settings

        settings = planner_settings()["memory"]
    s = setup
    optimizer = s.optimizer or settings["optimizer"][s.adapter]
    kind, paged = _optimizer_kind(optimizer)
    c = 4.0 if s.precision == "fp32" else 2.0
    P, lin = shape.params, shape.linear_params
    other = P - lin  # embeddings, lm_head, norms: never quantised
    terms: list[Term] = []
    unsharded_grads = s.fsdp_no_sync and s.gradient_accumulation_steps > 1 and s.zero_stage >= 2 and not s.deepspeed
    gs = 0 if unsharded_grads else 2  # the ZeRO stage from which the grads are sharded
    no_sync = " (accumulated unsharded under FSDP's no_sync)" if unsharded_grads else ""
    if s.adapter in ("qlora", "lora"):
        quant = s.adapter == "qlora" or s.load_in_8bit
        other_b = 4.0 if (quant and s.kbit_upcast) else c
        if s.adapter == "qlora":
            w, how = lin * _NF4_BYTES + other * other_b, f"{lin / 1e9:.2f}B linear x NF4 {_NF4_BYTES:.3f}"
        elif s.load_in_8bit:
            w, how = lin * 1.0 + other * other_b, f"{lin / 1e9:.2f}B linear x int8 1"
        else:
            base_b = 4.0 if s.frozen_fp32 else c
            w, how = P * base_b, f"{P / 1e9:.2f}B x {base_b:g}"
            other_b = base_b
        if s.adapter != "lora" or s.load_in_8bit:
            how += f" + {other / 1e9:.2f}B embeddings/norms x {other_b:g}"
        terms.append(Term("weights", w / GIB, how, shard=3, offload="param"))
        T = lora_trainable_params(shape, s.lora_r, s.lora_target_modules, s.lora_modules_to_save)
        # PEFT keeps adapters in fp32; a pure 16-bit run (torchtune, LitGPT's bf16-true) in the model's dtype
        ab = 4.0 if s.fp32_master_weights else c
        terms.append(Term("trainable", T * ab / GIB, f"{T / 1e6:.1f}M LoRA params x {ab:g}", shard=3))
        terms.append(Term("grads", T * ab / GIB, f"{T / 1e6:.1f}M x {ab:g}" + no_sync, shard=gs, phase="backward"))
        if s.frozen_fp32 and c == 2.0 and not s.gradient_checkpointing:
            terms.append(Term("autocast copies", lin * c / GIB, f"{lin / 1e9:.2f}B frozen linear x {c:g} (16-bit "
                              "casts saved for the backward pass)", phase="forward"))
        state_dtype = ab
    else:
        T = P
        if s.deepspeed and s.zero_stage >= 1 and s.fp32_master_weights:
            terms.append(Term("weights", P * c / GIB, f"{P / 1e9:.2f}B x {c:g} (DeepSpeed 16-bit params)",
                              shard=3, offload="param"))
            # ZeRO-Offload moves the gradient partitions to the host along with the optimizer
            terms.append(Term("grads", P * c / GIB, f"{P / 1e9:.2f}B x {c:g}", shard=2, offload="optimizer"))
            terms.append(Term("master weights", P * 4.0 / GIB, f"{P / 1e9:.2f}B x fp32 4", shard=1,
                              offload="optimizer"))
            terms.append(Term("fp32 grads", P * 4.0 / GIB, f"{P / 1e9:.2f}B x fp32 4 (the partition the optimiser "
                                                            "steps)", shard=1, offload="optimizer"))
            state_dtype = 4.0
        elif s.fp32_master_weights and c == 2.0:
            terms.append(Term("weights", P * 4.0 / GIB, f"{P / 1e9:.2f}B x fp32 4 (autocast)", shard=3,
                              offload="param"))
            grads = 0.0 if s.optimizer_in_backward else P * 4.0
            terms.append(Term("grads", grads / GIB, f"{P / 1e9:.2f}B x fp32 4" + no_sync, shard=gs, phase="backward",
                              offload="param"))  # FSDP's CPU offload moves grads with the params
            if not (s.gradient_checkpointing or s.zero_stage >= 3):
                terms.append(Term("autocast copies", lin * c / GIB,
                                  f"{lin / 1e9:.2f}B linear x {c:g} (16-bit casts saved for the backward pass)",
                                  phase="forward"))
            state_dtype = 4.0
        else:
            pb = c if not s.fp32_master_weights else 4.0
            terms.append(Term("weights", P * pb / GIB, f"{P / 1e9:.2f}B x {pb:g}", shard=3, offload="param"))
            grads = 0.0 if s.optimizer_in_backward else P * pb
            terms.append(Term("grads", grads / GIB, f"{P / 1e9:.2f}B x {pb:g}" + no_sync, shard=gs, phase="backward",
                              offload="param"))
            state_dtype = pb
    per_param = _OPT_BYTES_FP32[kind] * (state_dtype / 4.0 if kind == "adamw" else 1.0)
    terms.append(Term("optimizer", T * per_param / GIB, f"{T / 1e9:.3f}B x {optimizer} {per_param:g}"
                      + (" (paged: spills to host RAM when the GPU runs short)" if paged else ""),
                      shard=1, offload="optimizer", on_gpu=not paged))
    if kind == "adamw" and s.foreach and not (paged or s.deepspeed or s.optimizer_in_backward or "fused" in optimizer):
        # torch's multi-tensor AdamW takes the square root of every second moment into new tensors at once, while
        # the grads are held; the fused kernel and DeepSpeed's optimisers work in place
        terms.append(Term("optimizer step", T * state_dtype / GIB, f"{T / 1e9:.3f}B x {state_dtype:g} (foreach AdamW's "
                          "sqrt of the second moments)", shard=1, offload="optimizer", phase="step"))
    grads_gb = sum(t.gb for t in terms if t.name == "grads")
    if s.zero_stage == 0 and not s.deepspeed and grads_gb:
        # PyTorch DDP (torchrun without DeepSpeed or FSDP) all-reduces through flat buckets that it allocates
        # beside the .grad tensors (gradient_as_bucket_view is off by default): a second copy of the grads
        terms.append(Term("DDP buckets", grads_gb, "the grads again (DDP's all-reduce buckets, on more than one GPU)",
                          data_parallel=True))
    if s.optimizer_in_backward and s.adapter == "full":
        largest = shape.largest_module_params
        terms.append(Term("grads in flight", largest * c / GIB, f"largest module {largest / 1e6:.0f}M x {c:g}"))
    if s.zero_stage >= 3:
        if s.deepspeed:
            largest = shape.largest_module_params
            terms.append(Term("ZeRO-3 gathered", largest * c * 2 / GIB,
                              f"largest module {largest / 1e6:.0f}M x {c:g} x 2 (gathered, and its grad)"))
            terms.extend(_reuse_term(shape, s, weight_bytes=_frozen_weight_bytes(s, c)))
        else:
            terms.append(_fsdp_working_set(shape, s, c))
    if s.deepspeed and s.zero_stage >= 1:
        terms.extend(_deepspeed_buckets(shape, s, c))
    terms.extend(Term(name, n / GIB, formula, phase="forward") for name, n, formula in activation_terms(shape, s, c))
    if shape.alibi_mask:
        # held from the forward pass's start to the backward pass's end (each checkpointed layer keeps it as an
        # input): beside the activations and the grads alike
        n = (1 + s.micro_batch_size) * shape.heads * s.sequence_len ** 2
        terms.append(Term("ALiBi mask", n * c / GIB, f"(1 cached + {s.micro_batch_size} combined) x {shape.heads} heads "
                          f"x {s.sequence_len}^2 x {c:g} (the model's code materialises its ALiBi bias)"))
    return MemoryEstimate(
        shape=shape, setup=s, params=P, trainable_params=T, terms=tuple(terms),
        context_gb=float(settings["cuda_context_gb"]), overhead=float(settings["allocator_overhead"]),
        fragmentation=0.0 if s.packing else float(settings.get("fragmentation_unpacked", 0.0)),
        optimizer=optimizer,
    )


def setup_from_recipe(recipe: Any) -> TrainSetup:
    """The `TrainSetup` of a `launchpad.recipe.Recipe`: what launchpad's trainer will run."""
    src = getattr(recipe, "source_path", None)
    base_dir = Path(src).parent if src else None
    ds = read_deepspeed(recipe.deepspeed, base_dir)
    targets = recipe.lora_target_modules
    if isinstance(targets, str):
        targets = targets_of_pattern(targets)
    quantised = recipe.adapter == "qlora" or bool(getattr(recipe, "load_in_8bit", False))
    return TrainSetup(
        adapter=recipe.adapter, sequence_len=recipe.sequence_len, micro_batch_size=recipe.micro_batch_size,
        # QLoRA always checkpoints (the trainer turns it on, as Axolotl does)
        gradient_checkpointing=bool(recipe.gradient_checkpointing or recipe.adapter == "qlora"), lora_r=recipe.lora_r,
        lora_target_modules=tuple(targets) if targets is not None else None,
        lora_modules_to_save=tuple(recipe.lora_modules_to_save or ()),
        lora_dropout=float(getattr(recipe, "lora_dropout", 0.05)),
        optimizer=getattr(recipe, "optimizer", None), zero_stage=ds.stage, deepspeed=bool(recipe.deepspeed),
        offload_optimizer=ds.offload_optimizer, offload_param=ds.offload_param, reuse_distance=ds.reuse_distance,
        reduce_bucket_size=ds.reduce_bucket_size, prefetch_bucket_size=ds.prefetch_bucket_size,
        overlap_comm=ds.overlap_comm, contiguous_gradients=ds.contiguous_gradients,
        load_in_8bit=bool(getattr(recipe, "load_in_8bit", False)),
        precision="fp32" if recipe.bf16 is False else "bf16",
        # TRL's SFTTrainer puts a quantised model's trainable params (the adapters) in bf16; PEFT's own are fp32
        fp32_master_weights=bool(getattr(recipe, "fp32_master_weights", True)) and not quantised,
        # FlashAttention-2 when the recipe insists, else SDPA (or FlashAttention-2 where installed); eager only
        # where transformers has neither for the architecture (attention_is_eager)
        attention="flash" if getattr(recipe, "flash_attention", "auto") is True else "sdpa", loss="tiled",
        packing=bool(getattr(recipe, "sample_packing", False)),
        gradient_accumulation_steps=int(getattr(recipe, "gradient_accumulation_steps", 1)),
        # PEFT's kbit preparation (launchpad's trainer runs it) leaves embeddings and norms in fp32, bitsandbytes
        # returns each linear's output in its input's dtype, and TRL (>= 1.x) no longer casts them back to bf16:
        # the layers' residual stream is fp32 (tests/train/test_qlora.py). Published runs differ: off by default.
        fp32_residual=quantised,
    )


def recipe_shape(recipe: Any) -> ModelShape:
    """The recipe's model shape (raises `UnknownModel` with how to give it)."""
    src = getattr(recipe, "source_path", None)
    base_dir = Path(src).parent if src else None
    return resolve_shape(recipe.base_model, base_dir, getattr(recipe, "base_model_config", None))


def model_shape(base_model: str, base_dir: Path | None = None) -> ModelShape | None:
    """The shape of `base_model`, None when it cannot be sized (see `launchpad.planner.shapes`)."""
    return try_shape(base_model, base_dir)


__all__ = ["GIB", "LORA_DEFAULT_TARGETS", "DeepSpeedMemory", "ModelShape", "adapted_modules", "adapts_head",
           "targets_of_pattern", "MemoryEstimate", "Term", "TrainSetup", "UnknownModel", "estimate_memory",
           "lora_trainable_params", "model_shape", "read_deepspeed", "recipe_shape", "setup_from_recipe",
           "shape_from_config"]
