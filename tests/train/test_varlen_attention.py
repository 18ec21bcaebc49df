"""`launchpad_varlen`: PyTorch's own FlashAttention varlen kernel behind transformers' attention interface,
for `flash_attention: true` where flash-attn is not installed.

PyTorch's kernel runs on CUDA only (on CPU: "Could not run 'aten::_flash_attention_forward' with arguments
from the 'CPU' backend"). These tests run launchpad's side of it, everything but the kernel, on a tiny
Llama, with `cpu_reference_varlen_attn` in the kernel's place: a reference that computes what
`torch.nn.attention.varlen.varlen_attn` documents (each sequence of the flattened tokens attends only
within itself, causal, GQA, a sliding window) with SDPA, one sequence at a time. The real kernel is compared
with it and with SDPA on a GPU by benchmarks/varlen_check.py (benchmarks/gpu_checks.sh runs it)."""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def cpu_reference_varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, **kwargs):
    """`varlen_attn`'s contract on CPU (launchpad.train.varlen_attention.reference_varlen_attn), with what the
    real kernel demands of its inputs checked."""
    from launchpad.train.varlen_attention import reference_varlen_attn

    assert torch.equal(cu_seq_q, cu_seq_k) and cu_seq_q.dtype == torch.int32
    assert query.dtype in (torch.bfloat16, torch.float16)  # FlashAttention takes 16-bit inputs only
    assert max_q == max_k == int(cu_seq_q.diff().max())
    return reference_varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, **kwargs)


@pytest.fixture
def models():
    """The same random 2-layer Llama with grouped-query attention in bf16, under SDPA and under
    launchpad_varlen (the reference kernel in PyTorch's place)."""
    from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM
    from transformers.masking_utils import AttentionMaskInterface, flash_attention_mask

    from launchpad.train.varlen_attention import NAME, varlen_attention_forward

    calls: list[int] = []

    def counted(*args, **kwargs):
        calls.append(1)
        return cpu_reference_varlen_attn(*args, **kwargs)

    AttentionInterface.register(NAME, functools.partial(varlen_attention_forward, kernel=counted))
    AttentionMaskInterface.register(NAME, flash_attention_mask)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    sdpa = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    sdpa.config._attn_implementation = "sdpa"
    varlen = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    varlen.load_state_dict(sdpa.state_dict())
    varlen.config._attn_implementation = NAME
    varlen.kernel_calls = calls  # the tests check that the model really ran launchpad_varlen
    return sdpa, varlen


def close(a, b) -> bool:
    return torch.allclose(a.float(), b.float(), atol=3e-2, rtol=3e-2)


def test_padded_batch_attends_to_real_tokens_only(models):
    sdpa, varlen = models
    ids = torch.randint(3, 128, (3, 9))
    mask = torch.ones_like(ids)
    mask[0, 6:] = 0  # right padding
    mask[1, :4] = 0  # left padding: the real tokens come after the padding, which they must not see
    with torch.no_grad():
        want, got = sdpa(input_ids=ids, attention_mask=mask).logits, varlen(input_ids=ids, attention_mask=mask).logits
        unmasked = varlen(input_ids=ids).logits
    assert varlen.kernel_calls, "the model did not run launchpad_varlen"
    assert close(got[0, :6], want[0, :6]) and close(got[1, 4:], want[1, 4:]) and close(got[2], want[2])
    assert not close(unmasked[1, 4:], want[1, 4:])  # the check can fail


def test_packed_sequences_see_only_themselves(models):
    """TRL's padding-free packing: one row, the collator's cu_seq_lens; or position ids that restart."""
    _, varlen = models
    a, b = torch.randint(3, 128, (1, 7)), torch.randint(3, 128, (1, 5))
    row = torch.cat([a, b], 1)
    cu = torch.tensor([0, 7, 12], dtype=torch.int32)
    positions = torch.cat([torch.arange(7), torch.arange(5)]).unsqueeze(0)
    with torch.no_grad():
        alone_a, alone_b = varlen(input_ids=a).logits, varlen(input_ids=b).logits
        by_cu = varlen(input_ids=row, position_ids=positions, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                       max_length_q=7, max_length_k=7).logits
        by_positions = varlen(input_ids=row, position_ids=positions).logits
        leaking = varlen(input_ids=row).logits  # no boundary given: one long sequence, b sees a
    for packed in (by_cu, by_positions):
        assert close(packed[:, :7], alone_a) and close(packed[:, 7:], alone_b)
    assert not close(leaking[:, 7:], alone_b)  # the check can fail


def test_row_packed_batches_and_gradients_match_sdpa(models):
    """Several packed rows (launchpad's RowPackedCollator layout), trained: loss and grads as SDPA's."""
    sdpa, varlen = models
    ids = torch.randint(3, 128, (2, 8))
    positions = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 0, 1, 2, 3, 4]])
    labels = ids.clone()
    labels[positions == 0] = -100
    losses, grads = [], []
    for model in (sdpa, varlen):
        model.zero_grad()
        loss = model(input_ids=ids, position_ids=positions, labels=labels).loss
        loss.backward()
        losses.append(loss.item())
        grads.append(model.model.layers[0].self_attn.q_proj.weight.grad.float())
    assert losses[1] == pytest.approx(losses[0], rel=2e-2)
    assert torch.nn.functional.cosine_similarity(grads[0].flatten(), grads[1].flatten(), dim=0) > 0.99


def test_fp32_inputs_run_in_16_bit_and_unsupported_features_say_so():
    """PEFT's k-bit preparation leaves norms in fp32, so q, k, v can arrive in fp32: the kernel gets bf16.
    Soft-capping, dropout and sinks have no varlen equivalent here: a clear error, not a silent difference."""
    from types import SimpleNamespace

    from launchpad.train.varlen_attention import varlen_attention_forward

    seen = {}

    def kernel(q, k, v, *args, **kwargs):
        seen["dtype"], seen["gqa"], seen["window"] = q.dtype, kwargs["enable_gqa"], kwargs["window_size"]
        return cpu_reference_varlen_attn(q, k, v, *args, **kwargs)

    module = SimpleNamespace(training=True, is_causal=True, config=SimpleNamespace(dtype=torch.float32))
    q, k = torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8)
    out, weights = varlen_attention_forward(module, q, k, k.clone(), None, kernel=kernel, sliding_window=3)
    assert out.shape == (1, 6, 4, 8) and weights is None
    assert seen == {"dtype": torch.bfloat16, "gqa": True, "window": (2, 0)}
    # the collator's boundaries are taken as given (no device sync to find them in the position ids)
    cu = torch.tensor([0, 2, 6], dtype=torch.int32)
    varlen_attention_forward(module, q, k, k.clone(), None, kernel=lambda *a, **kw: seen.update(cu=a[3], longest=a[5])
                             or cpu_reference_varlen_attn(*a, **kw), position_ids=torch.arange(6)[None],
                             cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=4, max_length_k=4)
    assert seen["cu"].tolist() == [0, 2, 6] and seen["longest"] == 4
    for bad in ({"softcap": 50.0}, {"dropout": 0.1}, {"s_aux": torch.zeros(4)}):
        with pytest.raises(NotImplementedError, match="use sdpa"):
            varlen_attention_forward(module, q, k, k, None, kernel=kernel, **bad)


def test_chosen_for_flash_attention_true_only_where_it_can_run(monkeypatch):
    """flash_attention: true without flash-attn: PyTorch's kernel where it can run; auto stays on SDPA until
    the kernel has been measured on a GPU; on CPU it says why not."""
    import importlib.util

    from launchpad.train import model as model_module
    from launchpad.train import varlen_attention
    from launchpad.train.model import Precision, choose_attention

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(model_module.importlib.util, "find_spec",
                        lambda name, *a: None if name == "flash_attn" else real_find_spec(name, *a))
    bf16 = Precision(bf16=True, fp16=False)
    assert choose_attention(bf16, "auto") == ("sdpa", "flash-attn is not installed")
    attn, why = choose_attention(bf16, True)
    assert attn == "sdpa" and "PyTorch's own FlashAttention cannot run: no CUDA GPU" in why  # this CPU machine
    monkeypatch.setattr(varlen_attention, "unavailable_reason", lambda half: None)
    assert choose_attention(bf16, True)[0] == "launchpad_varlen"


def test_envcheck_accepts_flash_attention_true_with_torch_s_own_kernel():
    from types import SimpleNamespace

    from launchpad.train.envcheck import problems

    recipe = SimpleNamespace(resources=SimpleNamespace(gpu="H100", cuda=None), adapter="lora", flash_attention=True)
    env = {"versions": {"torch": "2.11.0", "flash-attn": None, "bitsandbytes": "0.50.2", "deepspeed": None},
           "gpus": [{"name": "NVIDIA H100", "memory_gb": 80.0, "capability": "9.0"}], "cuda_available": True,
           "torch_cuda": "13.0", "driver": "580", "torch_varlen": True}
    assert problems(recipe, env) == []
    old = problems(recipe, {**env, "torch_varlen": False, "versions": {**env["versions"], "torch": "2.6.0"}})
    assert old == ["flash_attention: true, but flash-attn is not installed and torch 2.6.0 has no FlashAttention "
                   "of its own (torch >= 2.10 has): pip install flash-attn, or flash_attention: auto"]


def test_models_whose_attention_it_cannot_compute_are_refused_before_loading():
    """Gemma 2 soft-caps its attention logits, gpt-oss has sinks: neither has a varlen equivalent, so a
    `flash_attention: true` run of them without flash-attn stops in seconds, saying so, not at the first step."""
    from transformers import Gemma2Config, GptOssConfig, LlamaConfig

    from launchpad.train.varlen_attention import model_unsupported

    assert model_unsupported(LlamaConfig()) is None
    assert model_unsupported(Gemma2Config()) == "gemma2 soft-caps its attention logits"
    assert model_unsupported(GptOssConfig()) == "gpt_oss has attention sinks"
    assert model_unsupported(LlamaConfig(attention_dropout=0.1)) == "llama has attention dropout 0.1"


def test_the_first_varlen_attn_signature_runs_the_same(models):
    """torch 2.10's varlen_attn takes only is_causal: no scale, no window, no GQA. launchpad pre-scales q and
    repeats the kv heads for it, with the same results."""
    from transformers import AttentionInterface

    from launchpad.train.varlen_attention import NAME, reference_varlen_attn, varlen_attention_forward

    seen = []

    def varlen_attn_2_10(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, return_aux=None):
        seen.append((query.shape[1], key.shape[1], is_causal))
        return reference_varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k,
                                     window_size=(-1, 0) if is_causal else (-1, -1))

    sdpa, varlen = models
    AttentionInterface.register(NAME, functools.partial(varlen_attention_forward, kernel=varlen_attn_2_10))
    ids = torch.randint(3, 128, (2, 9))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    with torch.no_grad():
        want, got = sdpa(input_ids=ids, attention_mask=mask).logits, varlen(input_ids=ids, attention_mask=mask).logits
    assert close(got[0], want[0]) and close(got[1, 3:], want[1, 3:])
    assert seen and all(s == (4, 4, True) for s in seen)  # the 2 kv heads repeated for the 4 query heads
    module = varlen.model.layers[0].self_attn
    q = torch.randn(1, 4, 6, 8)
    with pytest.raises(NotImplementedError, match="no sliding window"):
        varlen_attention_forward(module, q, q, q, None, kernel=varlen_attn_2_10, sliding_window=3)
    scaled = varlen_attention_forward(module, q, q, q, None, kernel=varlen_attn_2_10, scaling=0.5)[0]
    exact = varlen_attention_forward(module, q, q, q, None, kernel=cpu_reference_varlen_attn, scaling=0.5)[0]
    assert close(scaled, exact)  # the scale, applied to q, is the scale
