"""What one training step's forward pass keeps for the backward pass, per token: the memory estimate's
activations and logits terms (launchpad/planner/memory.py builds the rest).

Activations (bytes per token, c = 2 for bf16/fp16, 4 for fp32), counted per decoder layer from what autograd saves
for the backward pass (tests/train/test_activation_memory.py counts it with saved_tensors_hooks on tiny models on
CPU and compares). A layer whose weights train: two RMSNorms (each its fp32 upcast, the normalised tensor its
weight multiplies, and its output, which the next projection saves: 2(4 + c + c)h; Gemma's and OLMo's scale in
fp32, 4 + 4 + c; Gemma 2+ also normalises each sublayer's output, 4 + 4 more each; a LayerNorm keeps its 16-bit
input and output, 2c), q, k, v and the attention output (c(2q + 2kv)), the MLP's gate, SiLU, up and product (4c i,
the MoE's active experts, which also keep each token's copy per expert and each expert's output, 2k c h, and the
router's softmax; a two-matrix MLP 2c i with a fused GELU, 5c i with gelu_new's formula spelt out in Python, c i
with ReLU), QK-norm's fp32 copy and output of q and k ((4 + c)(q + kv): Qwen3, OLMo-2/3, Gemma-3, ...). Under
LoRA/QLoRA the base is frozen, and a frozen weight needs no input for its grad: a frozen projection keeps nothing
(bitsandbytes' int8 matmul keeps its input all the same), a frozen RMSNorm only its fp32 upcast (4h), the MLP's
last tensor only where down_proj is adapted; each adapted module keeps its input as its 16-bit matmul reads it
under autocast (a copy per module where PEFT's cast to the adapters' dtype or autocast's makes one: launchpad's
runs), or with dropout the dropout's output and mask, and lora_A's output (tests/train/test_activation_memory.py
also runs the trainer's own QLoRA and LoRA models against their plans). Eager attention (no FlashAttention/SDPA
kernel) adds the softmax (4 + c bytes per head per key). Gradient checkpointing keeps each layer's input (c h) plus
one layer recomputed in the backward pass. launchpad's own QLoRA/8-bit runs keep the residual stream, the norms and
the MLP in fp32 (4 bytes for those terms: `fp32_residual`, set by setup_from_recipe). Logits: c (16-bit) + 4 (fp32
upcast) + 4 (log-softmax) + 4 + 4 (its backward) bytes per token per vocabulary entry, c + 4 + c compiled; chunked
cross-entropy keeps c + c (eager: each chunk's log-softmax) or c + c/8 (compiled: one of torchtune's 8 chunks'
gradient), fused (Liger) none; launchpad's trainer one tile of TRL's tiled LM head (`_tiled_head`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lora_targets import adapted_modules, adapts_head, input_group

if TYPE_CHECKING:
    from .memory import TrainSetup
    from .shapes import ModelShape


# Tensors of the MLP's width that a two-matrix MLP saves for its backward pass, by activation: a fused kernel
# (F.gelu, tanh-approximate or not) saves its input, and the down projection its output; Hugging Face's
# gelu_new (GPT-2, phi, GPT-J) spells the tanh formula out in Python and autograd keeps its intermediates
# (x, tanh, x/2, 1 + tanh); quick_gelu keeps x and its sigmoid; ReLU's output serves both.
_PLAIN_MLP_SAVED = {"gelu_new": 5, "gelu_fast": 5, "gelu_python": 5, "quick_gelu": 3, "relu": 1}


def _mlp_saved(shape: ModelShape, s: TrainSetup) -> int:
    """How many tensors of the MLP's width one layer saves: a gated MLP its gate, up, activation and their
    product; a plain one by its activation (`_PLAIN_MLP_SAVED`, else 2)."""
    if shape.gated_mlp:
        return 4
    if s.fused_activation:
        return 1 if shape.hidden_act == "relu" else 2
    return _PLAIN_MLP_SAVED.get(shape.hidden_act, 2)


def attention_is_eager(shape: ModelShape, s: TrainSetup) -> tuple[bool, str]:
    """(eager attention?, why when the architecture, not the setup, decides it). `s.attention` "flash" is
    FlashAttention-2 for sure (the recipe's flash_attention: true), "sdpa" whatever memory-efficient kernel
    the machine has: SDPA, or FlashAttention-2 only where flash-attn happens to be installed."""
    if s.attention == "eager":
        return True, ""
    if "flash" not in shape.attention_kernels:
        return True, "transformers has no FlashAttention-2 or SDPA for this architecture"
    if "sdpa" not in shape.attention_kernels and s.attention != "flash":
        return True, "no SDPA for this architecture in transformers, and flash_attention is not true"
    return False, ""


def _trained_layer(shape: ModelShape, c: float, r: float, m: int) -> tuple[float, str]:
    """Bytes per token one decoder layer saves when its weights train, and how. An RMSNorm saves its input upcast
    to fp32 and the normalised tensor its weight multiplies (fp32 where it scales in fp32), and the projection
    after it saves its output (r); a LayerNorm keeps its input as is, and the output. Gemma 2+ also normalises
    each sublayer's output before the residual add: nothing saves those outputs."""
    h, q, kv, i = shape.hidden, shape.q_dim, shape.kv_dim, shape.active_intermediate
    n = 4.0 if shape.norm_fp32 else r
    norm, post = (2 * r, 0.0) if shape.layer_norm else (4 + n + r, (4 + n) * (shape.norms_per_layer - 2))
    per_layer = 2 * norm * h + post * h + c * (2 * q + 2 * kv) + m * r * i
    how = (f"2({'2*' + format(r, 'g') if shape.layer_norm else f'4+{n:g}+{r:g}'})h"
           + (f" + {post:g}h (post-norms)" if post else "") + f" + {c:g}(2q+2kv) + {m}*{r:g}*i")
    if shape.experts and shape.moe_layers:
        # an MoE layer gathers each token's hidden state for each of its k experts and keeps each expert's output
        # until the weighted sum (2 k r h); the router its fp32 softmax over the experts and the dispatch indices
        k, share = shape.experts_per_tok, shape.moe_layers / shape.layers
        per_layer += (2 * k * r * h + 4 * shape.experts + 40 * k) * share
        how += f" + MoE dispatch 2*{k}*{r:g}h + 4E + 40k" + (f" x {share:.2f} of the layers" if share < 1 else "")
    if shape.qk_norm:  # q and k go through a norm too: its fp32 copy, and (weighted) its output for the weight's grad
        qk = 4 + (n if shape.qk_norm == "rms" else 0)
        per_layer += qk * (q + kv)
        how += f" + QK-norm {qk:g}(q+kv)"
    return per_layer, how


def _litgpt_attention(shape: ModelShape, s: TrainSetup, c: float) -> tuple[float, str]:
    """What LitGPT's attention and LoRA keep beyond the count above, which has q, k, v and the output at their
    own widths: SDPA gets k and v at the query width (expanded copies where there are fewer kv heads), and
    under MHA v is a view of the fused qkv output, which keeps all of it alive; LoRA on some of q, k, v
    (LoRAQKVLinear) pads their outputs to the fused width and keeps the pad's source. Measured with LitGPT's own
    code on CPU (saved_tensors_hooks, one layer against two): Llama-2-7B LoRA q,v 181,000 bytes per token and
    layer at 2024's 5895df1 (164,516 at 2023's 8641822, whose RMSNorm ran in 16 bits), Llama-3-8B 178,440."""
    q, kv = shape.q_dim, shape.kv_dim
    v_kept = q + 2 * kv if kv == q else q
    extra = c * (q + v_kept - 2 * kv)
    how = f" + LitGPT k,v at query width {extra:g}"
    on = [p for p in s.litgpt_lora_qkv if p in ("q", "k", "v")]
    if s.adapter != "full" and 0 < len(on) < 3:
        pad = c * sum(q if p == "q" else kv for p in on)
        extra += pad
        how += f" + LoRA pad source {pad:g}"
    return extra, how


def _frozen_layer(shape: ModelShape, s: TrainSetup, c: float, r: float, m: int) -> tuple[float, str]:
    """Bytes per token one decoder layer saves under LoRA/QLoRA, and how. A frozen weight needs no input for its
    grad: a frozen projection saves nothing (bitsandbytes' int8 matmul keeps its input all the same), a frozen
    RMSNorm only its fp32 upcast (a LayerNorm its input), and the MLP's product only where down_proj is adapted.
    Each adapted module keeps its input as its 16-bit matmul reads it (a cast per module where the input is
    fp32), or with dropout the dropout's output and mask, and lora_A's output."""
    h, q, kv, i = shape.hidden, shape.q_dim, shape.kv_dim, shape.active_intermediate
    nb = r if shape.layer_norm else 4.0
    mf = m - 1 if m > 1 else m  # the MLP's last tensor is only the (frozen) down projection's input
    per_layer = shape.norms_per_layer * nb * h + c * (2 * q + 2 * kv) + mf * r * i
    how = f"{shape.norms_per_layer}*{nb:g}h (frozen norms) + {c:g}(2q+2kv) + {mf}*{r:g}*i"
    if shape.experts and shape.moe_layers:  # the expert outputs, for the routing weights' grad; the router
        k, share = shape.experts_per_tok, shape.moe_layers / shape.layers
        per_layer += (k * r * h + 4 * shape.experts + 40 * k) * share
        how += f" + MoE outputs {k}*{r:g}h + 4E + 40k" + (f" x {share:.2f} of the layers" if share < 1 else "")
    if shape.qk_norm:
        per_layer += 4 * (q + kv)
        how += " + QK-norm 4(q+kv)"
    # The adapters' matmuls run in the run's 16-bit dtype c (the trainer's autocast), so what they keep is c bytes.
    # PEFT first casts a module's input to the adapters' own dtype (fp32 for PEFT's, bf16 where TRL has cast a
    # quantised model's): where that or autocast changes the dtype, each module keeps a copy of its own; else the
    # input itself, once for the modules that share it.
    stored = 4.0 if s.fp32_master_weights else c
    # each group's input: elements, bytes (o_proj's is the attention output SDPA already keeps: nothing more)
    inputs = {"attn": (h, r), "mlp": (h, r), "o": (0, c), "down": (i, r)}
    kept = set(inputs) if s.load_in_8bit else set()
    lora = 0.0
    for name, fin, _ in adapted_modules(shape, s.lora_target_modules):
        group = input_group(name)
        dtype = inputs.get(group, (fin, r))[1]
        if s.lora_dropout > 0:
            lora += (c + 1) * fin  # the dropout's output as the matmul reads it, and the dropout's mask
        elif stored != dtype or dtype != c:
            lora += c * fin  # the module's own copy of its input
        else:
            kept.add(group)  # the input itself, whichever modules read it
        lora += c * s.lora_r  # lora_A's output, which lora_B saves
    held = sum(inputs[g][0] * inputs[g][1] for g in kept if g in inputs)
    per_layer += lora + held
    how += f" + LoRA {lora:g}" + (f" + inputs kept {held:g}" if held else "")
    return per_layer, how


#: torchtune's CEWithChunkedOutputLoss(num_output_chunks=8): its compiled loss keeps the c-byte logits, and
#: one chunk's gradient beside them in the backward pass (measured with inductor on CPU:
#: tests/train/test_activation_memory.py; benchmarks/loss_memory.py measures it on a GPU)
TORCHTUNE_OUTPUT_CHUNKS = 8


def activation_terms(shape: ModelShape, s: TrainSetup, c: float) -> list[tuple[str, float, str]]:
    """(name, bytes, formula) of the activations and the logits at their peak, for `estimate_memory`."""
    h, L, q, kv = shape.hidden, shape.layers, shape.q_dim, shape.kv_dim
    i = shape.active_intermediate
    tokens = s.sequence_len * s.micro_batch_size
    m = _mlp_saved(shape, s)
    r = 4.0 if s.fp32_residual else c  # bytes of the residual stream, the norms' outputs and the MLP's tensors
    if s.adapter == "full":
        per_layer, how = _trained_layer(shape, c, r, m)
    else:
        per_layer, how = _frozen_layer(shape, s, c, r, m)
    if s.litgpt_attention:
        extra, why = _litgpt_attention(shape, s, c)
        per_layer += extra
        how += why
    if r != c:
        how += " (fp32 residual stream: kbit preparation)"
    eager, why = attention_is_eager(shape, s)
    if eager:
        per_layer += shape.heads * s.sequence_len * (4 + c)
        how += f" + eager softmax heads*seq*(4+{c:g})" + (f" ({why})" if why else "")
    # torch.compile fuses the norms' and the MLP's elementwise ops: torchtune's table (Llama-3.2-3B, 8192 tokens)
    # has compiling save 9.0 GB, 5.9 of them the loss's (below), the rest 11% of the 28 GB of activations
    scale = 0.89 if s.compiled else 1.0
    if s.gradient_checkpointing and s.activation_offload:
        acts = tokens * per_layer * scale
        formula = (f"{tokens} tokens x one layer recomputed {per_layer / 1024:.0f} KiB [checkpointed inputs "
                   f"offloaded to host RAM; per layer {how}; h={h}, q={q}, kv={kv}, i={i}]")
    elif s.gradient_checkpointing:
        acts = tokens * (L * r * h + per_layer * scale)
        formula = (f"{tokens} tokens x ({L} layers x {r:g}h + one layer recomputed {per_layer / 1024:.0f} KiB) "
                   f"[gradient checkpointing; per layer {how}; h={h}, q={q}, kv={kv}, i={i}]")
    else:
        acts = tokens * L * per_layer * scale
        formula = f"{tokens} tokens x {L} layers x {per_layer / 1024:.0f} KiB [{how}; h={h}, q={q}, kv={kv}, i={i}]"
    terms = [("activations", acts, formula)]
    if s.loss == "tiled":
        terms.append(("logits", *_tiled_head(shape, s, c, r, tokens)))
        return terms
    # standard: c-byte logits + fp32 upcast + log-softmax (saved) + its grad and a temporary in the backward
    # pass. Compiled, inductor fuses the upcast into the loss's kernels: on CPU it keeps the c-byte logits and
    # their c-byte grad only (benchmarks/loss_memory.py: 4.0 bytes); on CUDA, published runs keep ~4 bytes more,
    # counted as the fp32 upcast (Liger's compiled Llama-3-8B: ~8.4 bytes per token and entry above its fused
    # loss; torchtune's Llama-3.2-3B: compiling saved 9 GB, chunking 8 GB more) until a GPU run of
    # benchmarks/loss_memory.py measures it. Fused (Liger, Cut Cross Entropy): neither. Chunked, compiled
    # (torchtune): the c-byte logits, each chunk upcast and scored inside inductor's kernels, which save the
    # 16-bit chunk only; one chunk's gradient beside them in the backward pass. Chunked, eager (LitGPT's
    # chunked_cross_entropy): every chunk's loss is computed before the backward pass, so each chunk's c-byte
    # log-softmax output is saved beside the logits (both measured: tests/train/test_activation_memory.py).
    # Not upcast (16-bit logits scored as they are): the logits' shifted copy, the log-softmax output and its
    # grad, 3c at the peak (measured on CPU the same way).
    chunked = c + (c / TORCHTUNE_OUTPUT_CHUNKS if s.compiled else c)
    standard = c + (4.0 + c if s.compiled else 12.0) if s.logits_upcast else 3 * c
    per_vocab = {"standard": standard, "chunked": chunked, "fused": 0.0}[s.loss]
    if s.adapter != "full" and adapts_head(s.lora_target_modules):
        per_vocab += c  # LoRA on the head: its vocabulary-wide output beside the base logits until they are added
    logits = tokens * shape.vocab * per_vocab
    if logits:
        terms.append(("logits", logits, f"{tokens} tokens x vocab {shape.vocab} x {per_vocab:g} bytes "
                                              f"({s.loss} cross-entropy)"))
    return terms


# TRL's SFTTrainer (>= 1.15, launchpad's trainer) scores the LM head in tiles of 4096 tokens x 32768 vocabulary
# entries (trl/kernels/chunked_logprob.py), never the whole logits. What a tile costs at its peak, per element, was
# measured on CPU (tests/train/test_activation_memory.py: the torch-ops path, fp32 temporaries beside the 16-bit
# tile); CUDA's Triton kernel folds each tile in place, so this is the most it keeps.
TILE_TOKENS, TILE_VOCAB, TILE_BYTES = 4096, 32768, 29.0


def _tiled_head(shape: ModelShape, s: TrainSetup, c: float, r: float, tokens: int) -> tuple[float, str]:
    """Bytes and formula of TRL's tiled LM head at the loss's backward: one tile, the head's rows cast to 16 bits
    for it where the head is fp32, the hidden states it keeps (r) and their fp32 grad, and the head's own fp32
    grad where it trains."""
    h, v = shape.hidden, shape.vocab
    tile = min(tokens, TILE_TOKENS) * min(v, TILE_VOCAB) * TILE_BYTES
    head_fp32 = (s.adapter == "full" and s.fp32_master_weights and not s.deepspeed) or (
        s.kbit_upcast and (s.adapter == "qlora" or s.load_in_8bit))
    rows = min(v, TILE_VOCAB) * h * c if head_fp32 else 0.0
    hidden = tokens * h * (r + 4)
    saved = set(s.lora_modules_to_save)
    trains_head = s.adapter == "full" or "lm_head" in saved or (shape.tied_embeddings and "embed_tokens" in saved)
    head_grad = v * h * 4 if trains_head else 0.0
    how = (f"one tile {min(tokens, TILE_TOKENS)} tokens x {min(v, TILE_VOCAB)} vocab x {TILE_BYTES:g} bytes"
           + (f" + the head's rows in {c:g} bytes" if rows else "") + f" + {tokens} tokens x h x ({r:g}+4)"
           + (" + the head's fp32 grad" if head_grad else "") + " (TRL's tiled LM head: no full logits)")
    return tile + rows + hidden + head_grad, how
