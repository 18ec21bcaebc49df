"""sample_packing: packed rows attend only within themselves. transformers builds a block-diagonal causal
mask from position ids that restart at each row (what TRL's packing emits), with PyTorch SDPA as with
FlashAttention: the packed rows' logits equal each row's own, so packing changes speed, not training."""

from __future__ import annotations

import pytest


@pytest.fixture
def tiny(launchpad_home):
    import torch
    from transformers import AutoModelForCausalLM

    from launchpad.train.tiny import ensure_tiny_llama

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_pretrained(str(ensure_tiny_llama()), attn_implementation="sdpa",
                                                dtype=torch.float32).eval()


def test_packed_rows_do_not_attend_to_each_other(tiny):
    import torch

    a, b = torch.randint(5, 100, (1, 7)), torch.randint(5, 100, (1, 5))
    with torch.no_grad():
        alone_a, alone_b = tiny(input_ids=a).logits, tiny(input_ids=b).logits
        packed = torch.cat([a, b], 1)
        positions = torch.cat([torch.arange(7), torch.arange(5)]).unsqueeze(0)
        both = tiny(input_ids=packed, position_ids=positions).logits
        leaking = tiny(input_ids=packed).logits  # one long row: b sees a
    assert torch.allclose(both[:, :7], alone_a, atol=1e-5) and torch.allclose(both[:, 7:], alone_b, atol=1e-5)
    assert not torch.allclose(leaking[:, 7:], alone_b, atol=1e-5)  # the check can fail
