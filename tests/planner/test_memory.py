"""The memory estimate's mechanisms, one by one (the calibration against published measurements is
test_memory_references.py), and where model shapes come from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launchpad.planner.memory import (
    TrainSetup,
    adapted_modules,
    estimate_memory,
    lora_trainable_params,
    model_shape,
    read_deepspeed,
    setup_from_recipe,
)
from launchpad.planner.shapes import ModelShape, UnknownModel, resolve_shape, shape_from_config

LLAMA3_8B = "meta-llama/Meta-Llama-3-8B"


def shape_of(base_model: str, base_dir: Path | None = None) -> ModelShape:
    shape = model_shape(base_model, base_dir=base_dir)
    assert shape is not None, base_model
    return shape


def est(adapter: str, model: str = LLAMA3_8B, world: int = 1, **kw):
    kw.setdefault("gradient_checkpointing", True)
    return estimate_memory(shape_of(model), TrainSetup(adapter=adapter, **kw))


def gb(adapter: str, world: int = 1, **kw) -> float:
    return est(adapter, **kw).per_gpu_gb(world)


def test_param_counts_match_the_published_models() -> None:
    assert shape_of(LLAMA3_8B).params == pytest.approx(8.03e9, rel=0.005)
    assert shape_of("meta-llama/Meta-Llama-3-70B-Instruct").params == pytest.approx(70.6e9, rel=0.01)
    assert shape_of("mistralai/Mistral-7B-v0.1").params == pytest.approx(7.24e9, rel=0.01)
    assert shape_of("Qwen/Qwen2-7B").params == pytest.approx(7.62e9, rel=0.01)
    assert shape_of("microsoft/Phi-3-mini-4k-instruct").params == pytest.approx(3.82e9, rel=0.01)
    # the builtin demo model (launchpad/train/tiny.py): hidden 128, 2 layers, 4 heads, 2 KV heads, vocab 1024
    tiny = shape_of("builtin:tiny-llama")
    assert (tiny.hidden, tiny.intermediate, tiny.layers, tiny.heads, tiny.kv_heads, tiny.vocab) == (
        128, 256, 2, 4, 2, 1024)
    assert tiny.params == pytest.approx(0.56e6, rel=0.01)


def test_moe_mla_plain_mlp_and_encoder_decoder_configs_are_counted() -> None:
    # Mixtral-8x7B's config.json: 8 experts of intermediate 14336, 2 per token -> 46.7B total
    mixtral = shape_from_config({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                                 "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                                 "vocab_size": 32000, "num_local_experts": 8, "num_experts_per_tok": 2})
    assert mixtral.params == pytest.approx(46.7e9, rel=0.01)
    assert mixtral.active_intermediate == 2 * 14336
    # GPT-NeoX (pythia-1.4b): two-matrix MLP, untied head -> 1.41B
    neox = shape_from_config({"model_type": "gpt_neox", "hidden_size": 2048, "intermediate_size": 8192,
                              "num_hidden_layers": 24, "num_attention_heads": 16, "vocab_size": 50304,
                              "tie_word_embeddings": False})
    assert not neox.gated_mlp and neox.params == pytest.approx(1.41e9, rel=0.02)
    # DeepSeek-V2-Lite: multi-head latent attention, 64 experts (6 per token) + 2 shared, first layer dense
    lite = shape_from_config({"model_type": "deepseek_v2", "hidden_size": 2048, "intermediate_size": 10944,
                              "moe_intermediate_size": 1408, "num_hidden_layers": 27, "num_attention_heads": 16,
                              "num_key_value_heads": 16, "vocab_size": 102400, "n_routed_experts": 64,
                              "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
                              "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128,
                              "qk_rope_head_dim": 64, "v_head_dim": 128})
    assert lite.params == pytest.approx(15.7e9, rel=0.02)
    # a T5 encoder-decoder (t5-v1_1 / mT0 layout): 24 + 24 layers, gated-gelu
    mt0 = shape_from_config({"model_type": "mt5", "d_model": 4096, "d_ff": 10240, "num_layers": 24,
                             "num_decoder_layers": 24, "num_heads": 64, "d_kv": 64, "vocab_size": 250112,
                             "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False})
    assert mt0.params == pytest.approx(12.9e9, rel=0.03)
    # state-space models: mamba-2.8b (64 Mamba-1 mixers, d_inner 5120, no attention, no MLP) is 2.77B
    mamba = shape_from_config({"model_type": "mamba", "hidden_size": 2560, "intermediate_size": 5120,
                               "num_hidden_layers": 64, "vocab_size": 50280, "state_size": 16,
                               "time_step_rank": 160, "tie_word_embeddings": True})
    assert mamba.n_attention_layers == 0 and mamba.params == pytest.approx(2.77e9, rel=0.02)
    # a table entry that knows the published total makes up for layers the formula cannot take apart
    odd = shape_from_config({"model_type": "rwkv-like", "hidden_size": 2560, "num_hidden_layers": 32,
                             "num_attention_heads": 1, "vocab_size": 50280, "params_published": 3.0e9})
    assert odd.params == pytest.approx(3.0e9, rel=0.001)


def test_the_bugs_this_replaced_are_gone() -> None:
    assert shape_of("Qwen/Qwen-1_8B").params == pytest.approx(1.84e9, rel=0.05)  # was read as 8B
    assert shape_of("mistralai/Mistral-7B-v0.1").vocab == 32000  # was given Llama-3's 128k vocabulary
    big = shape_of("hugging-quants/Meta-Llama-3.1-405B-BNB-NF4-BF16")
    assert big.params == pytest.approx(405e9, rel=0.02)  # was sized as 70B
    assert shape_of("mistral-community/Mixtral-8x22B-v0.1").params == pytest.approx(141e9, rel=0.02)
    # and Mixtral-8x22B LoRA is never offered one 40 GB card
    assert gb("lora", model="mistral-community/Mixtral-8x22B-v0.1") > 250


def test_ordering_and_knobs_move_the_estimate_the_right_way() -> None:
    assert gb("qlora") < gb("lora") < gb("full", optimizer="adamw_torch")
    assert gb("qlora", micro_batch_size=4) > gb("qlora", micro_batch_size=1)
    no_gc = gb("lora", gradient_checkpointing=False)
    assert no_gc > gb("lora") + 5
    # a published run without checkpointing is estimated as such (launchpad's own qlora always checkpoints:
    # setup_from_recipe turns it on, as the trainer does)
    assert gb("qlora", gradient_checkpointing=False) > gb("qlora") + 5
    # eager attention grows with the square of the sequence; FlashAttention/SDPA kernels do not
    flash = est("lora", sequence_len=8192).parts["activations"]
    eager = est("lora", sequence_len=8192, attention="eager").parts["activations"]
    assert eager > 1.5 * flash
    # the logits term: fused cross-entropy drops it, chunked keeps under a third (eager: 2c bytes, compiled: c + 1)
    std, chunked = est("lora").parts["logits"], est("lora", loss="chunked").parts["logits"]
    assert chunked < std / 2 and "logits" not in est("lora", loss="fused").parts


def test_full_fine_tune_precisions_and_optimizers() -> None:
    P = shape_of(LLAMA3_8B).params
    GiB = 2**30
    mixed = est("full", optimizer="adamw_torch")  # fp32 params under autocast: 4 + 4 + 8
    assert mixed.parts["weights"] * GiB == pytest.approx(P * 4) and mixed.parts["optimizer"] * GiB == pytest.approx(P * 8)
    pure = est("full", optimizer="adamw_torch", fp32_master_weights=False)  # bf16 2 + 2 + states in bf16 4
    assert pure.parts["weights"] * GiB == pytest.approx(P * 2) and pure.parts["optimizer"] * GiB == pytest.approx(P * 4)
    ds = est("full", optimizer="adamw_torch", zero_stage=2, deepspeed=True)  # the ZeRO paper's 2 + 2 + 12 (+ 4)
    assert sum(ds.parts[k] for k in ("weights", "grads", "master weights", "optimizer")) * GiB == pytest.approx(P * 16)
    # paged states spill to the host: they are shown but do not count against the card
    paged = est("full", optimizer="paged_adamw_8bit")
    assert paged.parts["optimizer"] > 0 and paged.peak_allocated_gb() == pytest.approx(
        mixed.peak_allocated_gb() - mixed.parts["optimizer"] - mixed.parts["optimizer step"])
    # states stepped in the backward pass: no full set of grads
    inbwd = est("full", optimizer="paged_adamw_8bit", fp32_master_weights=False, optimizer_in_backward=True)
    assert inbwd.parts["grads"] == 0 and inbwd.parts["grads in flight"] < 2


def test_foreach_adamw_holds_a_copy_of_the_second_moments_beside_the_grads_at_the_step() -> None:
    """torch's default multi-tensor AdamW takes sqrt(exp_avg_sq) of every parameter into new tensors while the
    grads are held; the fused kernel, DeepSpeed's optimisers and FlatParameters (stepped one at a time) do not."""
    P, GiB = shape_of(LLAMA3_8B).params, 2**30
    foreach = est("full", optimizer="adamw_torch", fp32_master_weights=False, gradient_checkpointing=True,
                  sequence_len=512)
    assert foreach.parts["optimizer step"] * GiB == pytest.approx(P * 2)  # one bf16 moment
    for other in (dict(optimizer="adamw_torch_fused"), dict(optimizer="adamw_torch", foreach=False),
                  dict(optimizer="adamw_torch", zero_stage=2, deepspeed=True), dict(optimizer="adamw_8bit")):
        assert "optimizer step" not in est("full", fp32_master_weights=False, **other).parts, other
    fused = est("full", optimizer="adamw_torch_fused", fp32_master_weights=False, gradient_checkpointing=True,
                sequence_len=512)
    # short rows: the step (grads + the copy) is the peak, not the forward pass
    assert foreach.peak_allocated_gb() - fused.peak_allocated_gb() == pytest.approx(foreach.parts["optimizer step"])
    assert any(line.startswith("optimizer step: ") for line in foreach.explain())


def test_an_fp32_residual_stream_doubles_the_checkpointed_inputs_and_the_mlp_but_not_attention_or_logits() -> None:
    shape, tokens = shape_of(LLAMA3_8B), 2048 * 4
    bf16 = est("qlora", sequence_len=2048, micro_batch_size=4)
    fp32 = est("qlora", sequence_len=2048, micro_batch_size=4, fp32_residual=True)
    extra = (fp32.parts["activations"] - bf16.parts["activations"]) * 2**30
    h, i, L = shape.hidden, shape.intermediate, shape.layers
    dropped = sum(inputs for _, inputs, _ in adapted_modules(shape, None))  # the adapted projections' inputs
    # each checkpointed layer input 2 more bytes per element; in the layer recomputed: the MLP's three tensors
    # (a frozen norm keeps its fp32 upcast either way; LoRA dropout's copies are in the adapters' fp32 either way)
    assert extra == pytest.approx(tokens * (L * 2 * h + 3 * 2 * i))
    assert dropped
    assert fp32.parts["logits"] == bf16.parts["logits"]  # the head's output is 16-bit under autocast
    assert any("fp32 residual stream" in line for line in fp32.explain())


def test_zero_sharding_divides_by_the_world_size() -> None:
    z3 = est("full", optimizer="adamw_torch", zero_stage=3, deepspeed=True)
    assert z3.per_gpu_gb(8) < z3.per_gpu_gb(1) / 4
    z2 = est("full", optimizer="adamw_torch", zero_stage=2, deepspeed=True)
    assert z3.per_gpu_gb(8) < z2.per_gpu_gb(8) < z2.per_gpu_gb(1)  # stage 2 keeps the weights whole
    # ZeRO-3 keeps the gathered largest module (the 525M-param embedding of Llama-3-8B) and its grad: ~2 GB
    assert 1.8 < z3.parts["ZeRO-3 gathered"] < 2.3
    off = est("full", optimizer="adamw_torch", zero_stage=3, deepspeed=True, offload_optimizer=True, offload_param=True)
    assert off.per_gpu_gb(8) < z3.per_gpu_gb(8)
    assert off.per_gpu_gb(8) > off.parts["ZeRO-3 gathered"] + off.parts["logits"]  # the working set stays
    plain = est("full", optimizer="adamw_torch")
    # DDP replicas each hold everything, and the all-reduce buckets are a second copy of the grads
    assert plain.per_gpu_gb(8) - plain.per_gpu_gb(1) == pytest.approx(plain.grads_gb * 1.1)
    assert "DDP buckets" not in "\n".join(plain.explain(1)) and "DDP buckets" in "\n".join(plain.explain(8))
    assert "DDP buckets" not in "\n".join(z3.explain(8))  # ZeRO (and FSDP) reduce without them


def test_fsdp_holds_its_root_unit_and_under_no_sync_the_whole_grads() -> None:
    """FSDP wrapping each decoder layer leaves the embedding and the head in the root unit, which it does not
    reshard after the forward, and whose grads build up through the whole backward pass; with its default backward
    prefetch it also holds this layer, the next one and this layer's grads (torch's BackwardPrefetch.BACKWARD_PRE).
    Wrapped apart (torchtune's custom_sharded_layers), the head's unit and a layer are the peak. A frozen base has
    no grads, and a QLoRA layer is gathered as NF4. Accumulating inside no_sync() keeps every grad whole."""
    shape = shape_of(LLAMA3_8B)
    P, emb, layer, GiB = shape.params, shape.embedding_params, shape.largest_layer_params, 2**30
    common: dict[str, Any] = dict(optimizer="adamw_torch", zero_stage=3, fp32_master_weights=False)
    deepspeed, fsdp = est("full", deepspeed=True, **common), est("full", **common)
    apart = est("full", fsdp_embeddings_apart=True, **common)
    assert emb == 2 * 128256 * 4096 and layer == 4096 * (2 * 4096 + 2 * 1024) + 3 * 4096 * 14336
    assert deepspeed.parts["ZeRO-3 gathered"] == pytest.approx(emb / 2 * 2 * 2 / GiB)  # its largest module, + grad
    assert fsdp.parts["ZeRO-3 gathered"] == pytest.approx((emb * 2 * 2 + layer * 3 * 2) / GiB)
    assert apart.parts["ZeRO-3 gathered"] == pytest.approx((emb / 2 * 2 * 2 + layer * 2) / GiB)  # head + grads, a layer
    lora = est("lora", zero_stage=3)
    qlora = est("qlora", zero_stage=3)
    assert lora.parts["ZeRO-3 gathered"] == pytest.approx((emb * 2 + layer * 2 * 2) / GiB)  # frozen: no grads
    assert qlora.parts["ZeRO-3 gathered"] < lora.parts["ZeRO-3 gathered"] - layer * 2 * 1.4 / GiB  # NF4 layers
    synced = est("full", gradient_accumulation_steps=4, **common)
    no_sync = est("full", gradient_accumulation_steps=4, fsdp_no_sync=True, **common)
    assert synced.term_gb(next(t for t in synced.terms if t.name == "grads"), 4) == pytest.approx(P * 2 / 4 / GiB)
    assert no_sync.term_gb(next(t for t in no_sync.terms if t.name == "grads"), 4) == pytest.approx(P * 2 / GiB)
    assert no_sync.peak_allocated_gb(4) - synced.peak_allocated_gb(4) == pytest.approx(P * 2 * 3 / 4 / GiB)
    assert any("no_sync" in line for line in no_sync.explain(4))
    # without accumulation, or under DeepSpeed (which reduces every micro-step), the grads stay sharded
    setups: list[dict[str, Any]] = [dict(fsdp_no_sync=True),
                                    dict(gradient_accumulation_steps=4, fsdp_no_sync=True, deepspeed=True)]
    for setup in setups:
        assert "no_sync" not in " ".join(est("full", **common, **setup).explain(4)), setup


def test_qk_norm_is_read_from_the_model_type_or_the_config_switch() -> None:
    """What autograd saves for it is measured in tests/train/test_activation_memory.py."""
    base = {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936}
    for mtype, extra, kind in (("qwen3", {}, "rms"), ("olmo3", {}, "rms"), ("gemma3_text", {}, "rms"),
                               ("llama", {}, ""), ("mistral", {}, ""), ("hunyuan_v1_dense", {"use_qk_norm": True}, "rms"),
                               ("hunyuan_v1_dense", {"use_qk_norm": False}, ""), ("llama4_text", {"use_qk_norm": True}, "l2")):
        assert shape_from_config({**base, "model_type": mtype, **extra}).qk_norm == kind, (mtype, extra)
    tokens, q, kv = 4096, 16 * 128, 8 * 128
    qwen3 = estimate_memory(shape_from_config({**base, "model_type": "qwen3"}),
                            TrainSetup(adapter="full", sequence_len=tokens, gradient_checkpointing=False))
    plain = estimate_memory(shape_from_config({**base, "model_type": "llama"}),
                            TrainSetup(adapter="full", sequence_len=tokens, gradient_checkpointing=False))
    added = (qwen3.parts["activations"] - plain.parts["activations"]) * 2**30
    assert added == pytest.approx(tokens * 28 * (4 + 2) * (q + kv))
    assert "QK-norm 6(q+kv)" in "\n".join(qwen3.explain())


def test_a_two_matrix_mlp_saves_what_its_activation_needs() -> None:
    """A fused GELU (GPT-NeoX's F.gelu) saves its input and the down projection its output: 2 tensors of the
    MLP's width; Hugging Face's gelu_new (phi, GPT-2) spells the tanh formula out and autograd keeps 5; a
    gated MLP 4; LitGPT calls one fused kernel for every GELU variant. Under LoRA the last of them is only the
    frozen down projection's input, which nothing keeps."""
    def per_token_mlp(model: str, adapter: str = "full", **kw) -> float:  # growth with the MLP width, per layer
        e = est(adapter, model=model, gradient_checkpointing=False, lora_dropout=0.0, lora_target_modules=("q_proj",),
                fp32_master_weights=False, **kw)
        shape, h = e.shape, e.shape.hidden
        if adapter == "full":  # a LayerNorm's input and output; an RMSNorm's fp32 upcast, normalised tensor, output
            norms = 2 * (2 * 2 if shape.layer_norm else 4 + 2 + 2) * h
        else:  # frozen: the LayerNorm's input; the RMSNorm's fp32 upcast
            norms = 2 * (2 if shape.layer_norm else 4) * h
        lora = 2 * 8 if adapter == "lora" else 0  # lora_A's output (its input, the attention's input, is kept below)
        kept = 2 * h if adapter == "lora" else 0
        other = norms + 2 * (2 * shape.q_dim + 2 * shape.kv_dim) + lora + kept
        return (e.parts["activations"] * 2**30 / (2048 * shape.layers) - other) / (2 * shape.intermediate)

    assert shape_of("EleutherAI/pythia-1.4b-deduped").hidden_act == "gelu"  # the table says gpt_neox only
    assert shape_of("microsoft/phi-2").hidden_act == "gelu_new"  # Hugging Face's default for phi
    assert per_token_mlp("EleutherAI/pythia-1.4b-deduped") == pytest.approx(2)
    assert per_token_mlp("microsoft/phi-2") == pytest.approx(5)
    assert per_token_mlp("microsoft/phi-2", fused_activation=True) == pytest.approx(2)
    assert per_token_mlp(LLAMA3_8B) == pytest.approx(4)
    assert per_token_mlp(LLAMA3_8B, adapter="lora") == pytest.approx(3)
    assert per_token_mlp("microsoft/phi-2", adapter="lora") == pytest.approx(4)
    opt = shape_from_config({"model_type": "opt", "hidden_size": 768, "ffn_dim": 3072, "num_hidden_layers": 12,
                             "num_attention_heads": 12, "vocab_size": 50272})
    assert opt.hidden_act == "relu" and not opt.gated_mlp


def test_zero3_keeps_the_layers_it_reuses_within_the_reuse_distance() -> None:
    """DeepSpeed keeps a gathered parameter that the trace uses again within stage3_max_reuse_distance
    (1e9 by default): at the turn to the backward pass, the last layers of a small model stay whole."""
    pythia = "EleutherAI/pythia-1b-deduped"  # 16 layers of ~50M, a 103M-param head
    z3 = est("full", model=pythia, zero_stage=3, deepspeed=True)
    # layer j from the end is used again after 2(head + j layers) params: 8 layers are within 1e9
    assert "last 8 layers" in "\n".join(z3.explain(4)) and 0.7 < z3.parts["ZeRO-3 reused"] < 0.8
    none = est("full", model=pythia, zero_stage=3, deepspeed=True, reuse_distance=0)  # Axolotl's configs
    assert "ZeRO-3 reused" not in none.parts
    assert z3.peak_allocated_gb(4) - none.peak_allocated_gb(4) == pytest.approx(z3.parts["ZeRO-3 reused"])
    # Llama-3-8B's 525M-param head alone is beyond half the distance: nothing before it stays
    assert "ZeRO-3 reused" not in est("full", zero_stage=3, deepspeed=True).parts
    # FSDP (deepspeed false) frees each unit after use
    assert "ZeRO-3 reused" not in est("full", model=pythia, zero_stage=3).parts


def test_lora_targets_in_other_architectures_spellings_are_counted() -> None:
    """Qwen-1's c_attn, Baichuan's W_pack, BLOOM/NeoX's query_key_value, torchtune's and LitGPT's switches:
    each adapts the projections it stands for (they counted as no LoRA parameters at all before)."""
    qwen1 = shape_of("Qwen/Qwen-7B-Chat")
    # one LoRA pair spans the fused q, k and v: one A (h x r), one B (r x 3h)
    assert lora_trainable_params(qwen1, 8, ("c_attn",)) == qwen1.layers * 8 * (4096 + 3 * 4096)
    assert adapted_modules(qwen1, ("c_attn",)) == [("c_attn", 4096, 3 * 4096)]
    # c_proj ends both the attention output and the MLP's down projection; w1/w2 are the MLP's inputs
    every = lora_trainable_params(qwen1, 8, ("all-linear",))
    fused_saving = qwen1.layers * 8 * 2 * 4096  # one A for q, k and v instead of three
    assert lora_trainable_params(qwen1, 8, ("c_attn", "c_proj", "w1", "w2")) == every - fused_saving
    assert lora_trainable_params(qwen1, 8, ("query_key_value",)) == lora_trainable_params(qwen1, 8, ("W_pack",))
    # torchtune: mlp = every MLP linear, output = the head
    llama = shape_of(LLAMA3_8B)
    tt = lora_trainable_params(llama, 8, ("q_proj", "v_proj", "output_proj", "mlp", "output"))
    hf = lora_trainable_params(llama, 8, ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
    assert tt == hf + 8 * (llama.hidden + llama.vocab)
    assert lora_trainable_params(llama, 8, ("nothing_by_that_name",)) == 0
    # a head adapter puts a vocabulary-wide LoRA output beside the logits
    head = est("lora", lora_target_modules=("q_proj", "lm_head")).parts["logits"]
    assert head > est("lora", lora_target_modules=("q_proj",)).parts["logits"]


def test_a_dotted_target_adapts_that_module_only_not_every_expert() -> None:
    moe = shape_of("mistralai/Mixtral-8x7B-v0.1")
    every_expert = lora_trainable_params(moe, 8, ("gate_proj",))
    assert lora_trainable_params(moe, 8, ("shared_expert.gate_proj",)) < every_expert / 4


def test_pure_16_bit_runs_keep_adapters_in_16_bit() -> None:
    mixed = est("lora", lora_r=64, lora_target_modules=("all-linear",), optimizer="adamw_torch")
    pure = est("lora", lora_r=64, lora_target_modules=("all-linear",), optimizer="adamw_torch",
               fp32_master_weights=False)
    assert pure.parts["trainable"] == pytest.approx(mixed.parts["trainable"] / 2)
    assert pure.parts["optimizer"] == pytest.approx(mixed.parts["optimizer"] / 2)


@pytest.mark.parametrize("model, measured", [("meta-llama/Llama-2-7b-hf", 181_000), ("meta-llama/Meta-Llama-3-8B", 178_440)])
def test_litgpt_s_attention_and_lora_per_layer_as_its_own_code_keeps(monkeypatch, model: str, measured: int) -> None:
    """LitGPT's LoRA rows (its own model code, not transformers'): bytes per token one layer keeps, LoRA r=32 on
    q and v, as measured with LitGPT's code at 5895df1 (the commit of its config-hub table) on CPU, one layer
    against two with saved_tensors_hooks (each storage once): SDPA keeps k and v at the query width (Llama-3's
    GQA expands them; Llama-2's v is a view that keeps the whole fused qkv output), and LoRAQKVLinear keeps the
    source of its zero pad. CPU's dropout keeps its mask in bf16 (2h) where CUDA's keeps a bool (h): measured - h."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the bundled shapes
    shape = resolve_shape(model)
    tokens = 1000
    setup = TrainSetup(adapter="lora", sequence_len=tokens, micro_batch_size=1, lora_r=32, lora_target_modules=("attn",),
                       lora_dropout=0.05, precision="bf16", fp32_master_weights=False, fused_activation=True,
                       litgpt_attention=True, litgpt_lora_qkv=("q", "v"), loss="fused")
    per_layer = estimate_memory(shape, setup).parts["activations"] * 2**30 / tokens / shape.layers
    assert per_layer == pytest.approx(measured - shape.hidden, rel=0.003)


def test_varying_row_lengths_fragment_the_allocator() -> None:
    packed, unpacked = est("lora", packing=True), est("lora")
    assert packed.peak_allocated_gb() == pytest.approx(unpacked.peak_allocated_gb())
    assert (packed.fragmentation, unpacked.fragmentation) == (0.0, 0.15)
    assert unpacked.per_gpu_gb() > packed.per_gpu_gb()


def test_explain_names_every_term_with_its_inputs() -> None:
    lines = est("qlora", lora_r=16).explain()
    text = "\n".join(lines)
    assert text.startswith("weights: ") and "NF4" in text and "embeddings/norms x 4" in text
    assert "activations: " in text and "h=4096" in text and "logits: " in text and "vocab 128256" in text
    assert "paged" in text and "not counted" in text


def test_local_config_json_wins(tmp_path: Path) -> None:
    model = tmp_path / "my-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 4, "vocab_size": 2000, "tie_word_embeddings": True}))
    shape = shape_of(str(model))
    assert (shape.hidden, shape.layers, shape.vocab, shape.tied_embeddings) == (256, 4, 2000, True)
    assert shape_of("my-model", base_dir=tmp_path).hidden == 256
    assert shape_of(f"file://{model}").hidden == 256
    assert resolve_shape("someorg/mystery", tmp_path, "my-model").hidden == 256  # base_model_config: a folder
    assert resolve_shape("someorg/mystery", None, LLAMA3_8B).hidden == 4096  # or another model's id


def test_unknown_models_are_an_error_that_says_how_to_size_them(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UnknownModel, match="base_model_config"):
        resolve_shape("someorg/mystery")
    with pytest.raises(UnknownModel, match="not a Hugging Face repo id"):
        resolve_shape("s3://bucket/some-model")
    assert model_shape("someorg/custom-8b-sft") is None  # a size in the name is no longer guessed from
    with pytest.raises(UnknownModel, match="num_hidden_layers"):
        resolve_shape("someorg/mystery", model_config={"hidden_size": 10})


def test_deepspeed_config_is_read(tmp_path: Path) -> None:
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}))
    # DeepSpeed's defaults where the file says nothing: reuse distance 1e9, buckets 5e8 / 5e7
    assert read_deepspeed(str(cfg)) == (3, True, False, 1_000_000_000, 500_000_000, 50_000_000, None, True)
    assert read_deepspeed("configs/deepspeed/zero2.json", tmp_path / "nowhere")[0] == 2
    assert read_deepspeed("zero3-offload")[:4] == (3, True, True, 1_000_000_000)  # a preset's name
    assert read_deepspeed("zero3-offload").reduce_bucket_size is None  # the presets say "auto"
    assert read_deepspeed(None)[:4] == (0, False, False, 1_000_000_000)
    axolotl = Path(__file__).resolve().parents[1] / "data" / "axolotl" / "deepspeed_configs" / "zero3_bf16.json"
    assert read_deepspeed(str(axolotl)).reuse_distance == 0  # spelt max_reuse_distance, as DeepSpeed allows


def test_deepspeed_buckets_come_from_its_config(tmp_path: Path) -> None:
    """DeepSpeed allocates its gradient bucket (two under ZeRO-1/2 with overlap_comm) at the configured size
    whatever the model: a JSON that leaves the size out gets DeepSpeed's 5e8 elements, ~1 GB in bf16 each;
    "auto" is the model's hidden^2 (the HF Trainer fills it)."""
    def buckets(cfg: dict[str, Any], adapter: str = "lora") -> float:
        path = tmp_path / "ds.json"
        path.write_text(json.dumps({"zero_optimization": cfg}))
        ds = read_deepspeed(str(path))
        e = est(adapter, zero_stage=ds.stage, deepspeed=True, reduce_bucket_size=ds.reduce_bucket_size,
                prefetch_bucket_size=ds.prefetch_bucket_size, overlap_comm=ds.overlap_comm,
                contiguous_gradients=ds.contiguous_gradients)
        return e.parts.get("ZeRO buckets", 0.0)

    GiB = 2**30
    assert buckets({"stage": 2, "overlap_comm": True}) == pytest.approx(2 * 5e8 * 2 / GiB)  # Axolotl's zero2.json
    assert buckets({"stage": 1}) == pytest.approx(5e8 * 2 / GiB)  # overlap_comm is off below ZeRO-3 by default
    assert buckets({"stage": 2, "reduce_bucket_size": "auto", "overlap_comm": True}) == pytest.approx(
        2 * 4096 ** 2 * 2 / GiB)
    assert buckets({"stage": 2, "contiguous_gradients": False}) == 0.0
    assert buckets({"stage": 3}) == pytest.approx((5e8 + 5e7) * 2 / GiB)
    assert buckets({"stage": 3, "reduce_bucket_size": 2e8, "stage3_prefetch_bucket_size": "1e7"}) == pytest.approx(
        (2e8 + 1e7) * 2 / GiB)
    bucket_line = [line for line in est("lora", zero_stage=2, deepspeed=True, reduce_bucket_size=int(5e8),
                                        overlap_comm=True).explain(1) if line.startswith("ZeRO buckets")]
    assert bucket_line == ["ZeRO buckets: 1.86 GB = reduce bucket 5e+08 elements x 2 (overlap_comm on) x 2"]


def test_baichuan_13b_s_alibi_masks_are_counted() -> None:
    """Baichuan's 13B code (ALiBi; its config.json has no max_position_embeddings) builds its bias as a
    [heads, seq, seq] tensor and adds the padding mask into a [batch, heads, seq, seq] one that every layer
    reads; the 7B code (RoPE, which states max_position_embeddings) builds neither."""
    common = dict(model_type="baichuan", hidden_size=5120, intermediate_size=13696, num_hidden_layers=40,
                  num_attention_heads=40, vocab_size=125696, tie_word_embeddings=False)
    alibi = shape_from_config({**common, "model_max_length": 4096})
    rope = shape_from_config({**common, "max_position_embeddings": 4096})
    assert alibi.alibi_mask and not rope.alibi_mask
    setup = TrainSetup(adapter="lora", sequence_len=8192, micro_batch_size=2, gradient_checkpointing=True)
    with_mask, without = estimate_memory(alibi, setup), estimate_memory(rope, setup)
    assert with_mask.parts["ALiBi mask"] == pytest.approx(3 * 40 * 8192 ** 2 * 2 / 2**30)  # 15 GiB at 8k
    assert "ALiBi mask" not in without.parts
    assert with_mask.peak_allocated_gb() - without.peak_allocated_gb() == pytest.approx(with_mask.parts["ALiBi mask"])


def test_setup_from_recipe(write_recipe) -> None:
    r = write_recipe(adapter="lora", lora_r=16, lora_target_modules=["q_proj", "v_proj"], micro_batch_size=2)
    s = setup_from_recipe(r)
    assert (s.adapter, s.lora_r, s.lora_target_modules, s.micro_batch_size) == ("lora", 16, ("q_proj", "v_proj"), 2)
    # the machine's memory-efficient kernel (SDPA, or FlashAttention-2 where installed); FlashAttention-2 for
    # sure only when the recipe says flash_attention: true
    # and TRL's tiled LM head (the trainer's SFTTrainer >= 1.15 never holds the whole logits)
    assert (s.attention, s.loss, s.kbit_upcast, s.deepspeed) == ("sdpa", "tiled", True, False)
    assert setup_from_recipe(write_recipe(adapter="lora", flash_attention=True)).attention == "flash"
    assert setup_from_recipe(write_recipe(adapter="qlora", gradient_checkpointing=False)).gradient_checkpointing
    # launchpad's kbit runs keep the residual stream in fp32 (tests/train/test_qlora.py shows it on the model)
    assert not s.fp32_residual and setup_from_recipe(write_recipe(adapter="qlora")).fp32_residual
    assert setup_from_recipe(write_recipe(adapter="lora", load_in_8bit=True)).fp32_residual
    full = setup_from_recipe(write_recipe(adapter="full", fp32_master_weights=False, deepspeed="zero3"))
    assert (full.fp32_master_weights, full.zero_stage, full.deepspeed) == (False, 3, True)


def test_trl_s_tiled_lm_head_is_one_tile_whatever_the_context() -> None:
    """What launchpad's trainer holds for its LM head (measured on CPU in tests/train/test_activation_memory.py):
    one tile of at most 4096 tokens x 32768 entries, the hidden states and their fp32 grad, not the logits."""
    shape, GiB = shape_of(LLAMA3_8B), 2**30
    h = shape.hidden

    def logits(**kw) -> float:
        return est("qlora", **{"loss": "tiled", "fp32_residual": True, **kw}).parts["logits"] * GiB

    rows = 32768 * h * 2  # the fp32 head (PEFT's kbit preparation) cast to 16 bits, a tile's rows at a time
    assert logits(sequence_len=2048, micro_batch_size=4) == pytest.approx(4096 * 32768 * 29 + rows + 8192 * h * 8)
    assert logits(sequence_len=512) == pytest.approx(512 * 32768 * 29 + rows + 512 * h * 8)
    standard = est("qlora", sequence_len=2048, micro_batch_size=4, fp32_residual=True).parts["logits"] * GiB
    assert standard == pytest.approx(8192 * shape.vocab * 14) and standard > 3 * logits(sequence_len=2048, micro_batch_size=4)
    assert "no full logits" in "\n".join(est("qlora", loss="tiled").explain())
