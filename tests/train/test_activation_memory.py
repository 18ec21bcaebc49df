"""The memory estimate's per-layer activation terms against what autograd really saves: tiny random-init models
of the same sizes in bf16 on CPU, the bytes of every tensor saved for the backward pass (torch's
saved_tensors_hooks, each storage counted once, parameters left out), one layer against two. Kernels differ
between CPU and GPU (what SDPA keeps, GQA's repeated keys), so the test compares architectures with each other:
what one design saves beyond another must be what the estimate adds for it."""

from __future__ import annotations

import functools
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from launchpad.planner.memory import TrainSetup, estimate_memory  # noqa: E402
from launchpad.planner.shapes import shape_from_config  # noqa: E402

SIZES: dict[str, Any] = {"hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
                         "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000}
TOKENS = 256


def _recorder(saved: dict[int, int]):
    def keep(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    return keep


@functools.cache
def saved_bytes_per_token_and_layer(model_type: str, extra: tuple[tuple[str, Any], ...] = ()) -> float:
    """Bytes autograd saves per token for one decoder layer of `model_type` (two layers minus one); `extra`:
    config keys beside SIZES."""
    totals = []
    for layers in (1, 2):
        config = transformers.AutoConfig.for_model(model_type, num_hidden_layers=layers, **SIZES, **dict(extra))
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16,
                                                              attn_implementation="sdpa").train()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        saved: dict[int, int] = {}
        ids = torch.randint(0, SIZES["vocab_size"], (1, TOKENS))
        with torch.autograd.graph.saved_tensors_hooks(_recorder(saved), lambda t: t):
            model(input_ids=ids, labels=ids).loss.backward()
        totals.append(sum(n for ptr, n in saved.items() if ptr not in params))
    return (totals[1] - totals[0]) / TOKENS


def estimated_bytes_per_token_and_layer(model_type: str, extra: tuple[tuple[str, Any], ...] = ()) -> float:
    config = transformers.AutoConfig.for_model(model_type, num_hidden_layers=1, **SIZES, **dict(extra))
    shape = shape_from_config(config.to_dict())
    est = estimate_memory(shape, TrainSetup(adapter="full", sequence_len=TOKENS, micro_batch_size=1,
                                            gradient_checkpointing=False))
    return est.parts["activations"] * 2**30 / TOKENS


def test_one_llama_layer_saves_what_the_estimate_counts() -> None:
    """Per token: each RMSNorm its fp32 input, the normalised tensor its weight multiplies and (saved by the
    projection after it) its output, 2(4 + 2 + 2)h; q, k, v and the attention output 2(2q + 2kv); the MLP's
    gate, SiLU, up and product 4 x 2i. What is left is SDPA's log-sum-exp and the norms' scales (24 bytes)."""
    h, i = SIZES["hidden_size"], SIZES["intermediate_size"]
    q, kv = SIZES["num_attention_heads"] * SIZES["head_dim"], SIZES["num_key_value_heads"] * SIZES["head_dim"]
    estimated = estimated_bytes_per_token_and_layer("llama")
    assert estimated == 2 * 8 * h + 2 * (2 * q + 2 * kv) + 8 * i
    assert saved_bytes_per_token_and_layer("llama") == pytest.approx(estimated, rel=0.01)


@pytest.mark.parametrize("model_type", ["qwen3", "olmo3", "gemma", "gemma3_text", "mistral", "starcoder2"])
def test_what_an_architecture_saves_beyond_llama_is_what_the_estimate_adds(model_type: str) -> None:
    """Beside Llama: Qwen3 normalises each head's queries and keys, (4 + 2)(q + kv) bytes more per token and
    layer; Gemma's and OLMo's norms scale by their weight in fp32, so each keeps an fp32 normalised tensor
    (OLMo-3's QK-norm too; its norms follow the sublayers, whose projections save the residual instead);
    Gemma 3 adds QK-norm and a norm after each sublayer, whose output only the residual add takes; StarCoder2's
    LayerNorm keeps its 16-bit input (no fp32 copy) and its MLP two tensors; Mistral saves what Llama does."""
    measured = saved_bytes_per_token_and_layer(model_type) - saved_bytes_per_token_and_layer("llama")
    estimated = estimated_bytes_per_token_and_layer(model_type) - estimated_bytes_per_token_and_layer("llama")
    h, i = SIZES["hidden_size"], SIZES["intermediate_size"]
    q, kv = SIZES["num_attention_heads"] * SIZES["head_dim"], SIZES["num_key_value_heads"] * SIZES["head_dim"]
    assert estimated == {"qwen3": 6 * (q + kv), "olmo3": 2 * 2 * h + 8 * (q + kv), "gemma": 2 * 2 * h,
                         "gemma3_text": 2 * 2 * h + 2 * 8 * h + 8 * (q + kv), "mistral": 0,
                         "starcoder2": 2 * (4 - 8) * h + (2 - 4) * 2 * i}[model_type]
    assert measured == pytest.approx(estimated, abs=0.01 * saved_bytes_per_token_and_layer("llama")), (measured, estimated)


@pytest.mark.parametrize("model_type,experts", [("mixtral", {"num_local_experts": 4}),
                                                ("qwen3_moe", {"num_experts": 4, "moe_intermediate_size": 512}),
                                                ("phimoe", {"num_local_experts": 4})])
def test_an_moe_layer_also_keeps_each_token_s_copy_for_each_expert_and_the_expert_outputs(
        model_type: str, experts: dict[str, Any]) -> None:
    """Top-2 of 4 experts: the layer gathers each token's hidden state once per expert it goes to and keeps each
    expert's output until the weighted sum, 2 x 2 x 2h bytes a token, beside the experts' own MLP tensors; the
    router's fp32 softmax and the dispatch indices are ~100 bytes. PhiMoE's norms are LayerNorms."""
    extra = tuple({"num_experts_per_tok": 2, **experts}.items())
    measured = saved_bytes_per_token_and_layer(model_type, extra)
    assert measured == pytest.approx(estimated_bytes_per_token_and_layer(model_type, extra), rel=0.01)
