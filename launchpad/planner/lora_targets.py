"""LoRA targets in any architecture's or framework's spelling, mapped onto the Llama-style projections of a
decoder layer: which modules LoRA adapts, and how many parameters it trains (the memory estimate's input)."""

from __future__ import annotations

import re

from .shapes import ModelShape

LORA_DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


# Where each LoRA target sits in a decoder layer, under the prefixes HF uses for text models and for the
# language model of a multimodal one: a regular expression is matched against these whole names, as PEFT does.
_MODULE_PARENT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
                  "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
_LAYER_PREFIXES = ("model.layers.0", "model.language_model.layers.0", "language_model.model.layers.0",
                   "transformer.h.0", "model.decoder.layers.0")


def targets_of_pattern(pattern: str) -> tuple[str, ...]:
    """The LoRA target names (q_proj, ..., down_proj) whose module a `lora_target_modules` regular expression
    selects: PEFT adapts a module when the expression matches its whole dotted name."""
    rx = re.compile(pattern)
    return tuple(name for name, parent in _MODULE_PARENT.items()
                 if any(rx.fullmatch(f"{prefix}.{parent}.{name}") for prefix in _LAYER_PREFIXES))


# LoRA target names other architectures and frameworks use, by the Llama-style projections they stand for.
# A fused name is one module (one LoRA pair, one dropout copy of its input) spanning several projections;
# `c_proj` ends both the attention output and the MLP's down projection in GPT-2/Qwen-1 models, and PEFT
# matches a name against the end of each module's path, so it adapts both. "mlp" and "output" are torchtune's
# and LitGPT's switches (every MLP linear; the output head), "lm_head" the head in PEFT and LitGPT.
_FUSED = {"c_attn": ("q_proj", "k_proj", "v_proj"), "W_pack": ("q_proj", "k_proj", "v_proj"),
          "attn": ("q_proj", "k_proj", "v_proj"),  # LitGPT's fused q/k/v: one dropout copy for all three
          "query_key_value": ("q_proj", "k_proj", "v_proj"), "qkv_proj": ("q_proj", "k_proj", "v_proj"),
          "Wqkv": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
_ALIASES = {"q": ("q_proj",), "k": ("k_proj",), "v": ("v_proj",), "query": ("q_proj",), "key": ("k_proj",),
            "value": ("v_proj",), "proj": ("o_proj",), "output_proj": ("o_proj",), "out_proj": ("o_proj",),
            "dense": ("o_proj",), "c_proj": ("o_proj", "down_proj"), "fc1": ("up_proj",), "fc_in": ("up_proj",),
            "dense_h_to_4h": ("up_proj",),
            "fc2": ("down_proj",), "fc_out": ("down_proj",), "dense_4h_to_h": ("down_proj",),
            "mlp": ("gate_proj", "up_proj", "down_proj")}
# Mixtral's experts name gate/down/up w1/w2/w3, Qwen-1's MLP its two input projections w1/w2: each takes
# the first of these not yet counted (the sizes agree either way)
_ONE_OF = {"w1": ("gate_proj", "up_proj"), "w2": ("up_proj", "down_proj"), "w3": ("up_proj", "down_proj", "gate_proj")}
_HEAD_NAMES = ("lm_head", "output")
_MLP_NAMES = ("gate_proj", "up_proj", "down_proj")


def input_group(name: str) -> str:
    """Which tensor an adapted module reads, as `adapted_modules` names it: "attn" (the attention's input, which
    q, k and v share), "mlp" (the MLP's input: gate and up), "o" (the attention's output), "down" (the MLP's
    inner activation)."""
    parts = set(_FUSED.get(name, (name,)))
    if parts & {"q_proj", "k_proj", "v_proj"}:
        return "attn"
    if parts & {"gate_proj", "up_proj"}:
        return "mlp"
    return {"o_proj": "o", "down_proj": "down"}.get(name, name)


def adapted_modules(shape: ModelShape, targets: tuple[str, ...] | None) -> list[tuple[str, int, int]]:
    """(name, in, out) of each linear module of one decoder layer that LoRA adapts, for target names in any
    of the spellings above (None = the attention projections); the output head is not among them."""
    dims = shape.module_dims()
    if targets is None:
        targets = LORA_DEFAULT_TARGETS
    if any(t in ("all-linear", "all_linear") for t in targets):
        targets = tuple(dims)
    out: list[tuple[str, int, int]] = []
    covered: set[str] = set()
    for t in dict.fromkeys(targets):
        leaf = t.rsplit(".", 1)[-1]
        if leaf in _FUSED:
            parts = [p for p in _FUSED[leaf] if p in dims and p not in covered]
            if parts:
                out.append((leaf, dims[parts[0]][0], sum(dims[p][1] for p in parts)))
                covered.update(parts)
            continue
        names = _ALIASES.get(leaf, (leaf,))
        if leaf in _ONE_OF:
            names = tuple(n for n in _ONE_OF[leaf] if n in dims and n not in covered)[:1]
        for name in names:
            if name in dims and name not in covered:
                out.append((name, *dims[name]))
                covered.add(name)
    return out


def adapts_head(targets: tuple[str, ...] | None) -> bool:
    """LoRA on the output head (a vocabulary-wide LoRA output beside the logits)."""
    return bool(targets) and any(t in _HEAD_NAMES for t in targets or ())


def lora_trainable_params(shape: ModelShape, r: int, targets: tuple[str, ...] | None,
                          modules_to_save: tuple[str, ...] = ()) -> int:
    modules = adapted_modules(shape, targets)
    per_layer = sum(r * (i + o) for _, i, o in modules)
    mlp = {n for n, _, _ in modules} & set(_MLP_NAMES)
    if shape.experts and mlp and not any("." in t for t in targets or ()):
        # PEFT adapts each expert's projections too (a dotted name, e.g. shared_expert.gate_proj, only its own)
        moe = r * (3 if shape.gated_mlp else 2) * (shape.hidden + shape.moe_intermediate) * shape.experts
        per_layer_moe = max(moe - sum(r * (i + o) for n, i, o in modules if n in mlp), 0)
    else:
        per_layer_moe = 0
    extra = r * (shape.hidden + shape.vocab) if adapts_head(targets) else 0
    for m in modules_to_save:
        if m in ("embed_tokens", "lm_head"):
            extra += shape.vocab * shape.hidden
    if shape.tied_embeddings and {"embed_tokens", "lm_head"} <= set(modules_to_save):
        extra -= shape.vocab * shape.hidden
    return shape.layers * per_layer + shape.moe_layers * per_layer_moe + extra
