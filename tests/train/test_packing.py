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


def test_row_packed_collator_keeps_rows_and_masks_row_starts():
    from launchpad.train.packing import RowPackedCollator

    batch = RowPackedCollator(pad_token_id=0)([
        {"input_ids": [11, 12, 13, 21, 22], "labels": [11, 12, 13, 21, 22], "seq_lengths": [3, 2]},
        {"input_ids": [31, 32, 33], "labels": [-100, 32, 33], "seq_lengths": [3]},
    ])
    assert "attention_mask" not in batch  # else transformers would ignore the rows' boundaries
    assert batch["input_ids"].shape == (2, 5)  # one batch row per packed sequence, not one row for all
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1], [0, 1, 2, 0, 0]]
    # 21 would be predicted from 13, the end of another row; the padding is never a label
    assert batch["labels"].tolist() == [[11, 12, 13, -100, 22], [-100, 32, 33, -100, -100]]


def test_row_packed_loss_is_each_rows_own_loss(tiny):
    """The loss of a batch of packed rows = the token-weighted loss of its rows run one at a time."""
    import torch

    from launchpad.train.packing import RowPackedCollator

    torch.manual_seed(1)
    rows = [torch.randint(5, 100, (n,)).tolist() for n in (6, 4, 5, 3)]
    packed = [{"input_ids": rows[0] + rows[1], "seq_lengths": [6, 4]},
              {"input_ids": rows[2] + rows[3], "seq_lengths": [5, 3]}]
    batch = RowPackedCollator(pad_token_id=0)(packed)
    with torch.no_grad():
        loss = tiny(**batch).loss.item()
        total = sum(tiny(input_ids=torch.tensor([r]), labels=torch.tensor([r])).loss.item() * (len(r) - 1) for r in rows)
    assert loss == pytest.approx(total / sum(len(r) - 1 for r in rows), rel=1e-5)


def test_keep_rows_swaps_the_collator_unless_flash_attention(tiny):
    from types import SimpleNamespace

    from launchpad.train.packing import RowPackedCollator, keep_rows

    def trainer():
        return SimpleNamespace(args=SimpleNamespace(packing=True, pad_to_multiple_of=None), data_collator="trl's",
                               processing_class=SimpleNamespace(pad_token_id=0))

    lines: list[str] = []
    t = trainer()
    assert keep_rows(t, "sdpa", lines.append) and isinstance(t.data_collator, RowPackedCollator)
    assert "one packed sequence per batch row" in lines[0]
    f = trainer()
    assert not keep_rows(f, "flash_attention_2", lines.append) and f.data_collator == "trl's"
