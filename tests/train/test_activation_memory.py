"""The memory estimate's per-layer activation terms against what autograd really saves: tiny random-init models
of the same sizes in bf16 on CPU, the bytes of every tensor saved for the backward pass (torch's
saved_tensors_hooks, each storage counted once, parameters left out), one layer against two. Kernels differ
between CPU and GPU (what SDPA keeps, GQA's repeated keys), so the test compares architectures with each other:
what one design saves beyond another must be what the estimate adds for it."""

from __future__ import annotations

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


def saved_bytes_per_token_and_layer(model_type: str) -> float:
    """Bytes autograd saves per token for one decoder layer of `model_type` (two layers minus one)."""
    totals = []
    for layers in (1, 2):
        config = transformers.AutoConfig.for_model(model_type, num_hidden_layers=layers, **SIZES)
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


def estimated_bytes_per_token_and_layer(model_type: str) -> float:
    config = transformers.AutoConfig.for_model(model_type, num_hidden_layers=1, **SIZES)
    shape = shape_from_config(config.to_dict())
    est = estimate_memory(shape, TrainSetup(adapter="full", sequence_len=TOKENS, micro_batch_size=1,
                                            gradient_checkpointing=False))
    return est.parts["activations"] * 2**30 / TOKENS


def test_qk_norm_saves_an_fp32_copy_and_the_output_of_queries_and_keys() -> None:
    """Qwen3 is Llama with an RMSNorm on each head's queries and keys: per token and layer it saves
    (4 + 2)(q + kv) bytes more (and one fp32 scale per head), which the estimate now counts."""
    measured = saved_bytes_per_token_and_layer("qwen3") - saved_bytes_per_token_and_layer("llama")
    estimated = estimated_bytes_per_token_and_layer("qwen3") - estimated_bytes_per_token_and_layer("llama")
    q, kv = SIZES["num_attention_heads"] * SIZES["head_dim"], SIZES["num_key_value_heads"] * SIZES["head_dim"]
    assert estimated == (4 + 2) * (q + kv)
    assert measured == pytest.approx(estimated, rel=0.02), (measured, estimated)
