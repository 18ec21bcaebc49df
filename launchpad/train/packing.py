"""sample_packing without FlashAttention: packed sequences stay one batch row each.

TRL packs rows best-fit into sequences of up to `sequence_len` tokens and, by default, collates a batch
padding-free: every sequence of the batch concatenated into one row. With FlashAttention's varlen kernel
that costs nothing; with PyTorch SDPA or eager attention the mask over that one row is
(batch x sequence_len) squared, so attention does batch-times the work and packing ends up slower than
padding (measured on CPU: 0.76x). Keeping each packed sequence its own row, with position ids that restart
at each original row and no attention mask, lets transformers build the block-diagonal causal mask per
batch row (`masking_utils.find_packed_sequence_indices`): no row attends to another, and the attention
work stays at batch x sequence_len squared, as with padding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: model_type values whose transformers class does not keep packed samples apart: ALiBi models (BLOOM, MPT)
#: build their own masks and ignore the position ids, gpt-oss's sink/sliding-window mask does not look for
#: packed rows, and state-space/recurrent layers (Mamba, RWKV, the hybrids) carry their state from one sample
#: into the next. Packed, each sample would see the ones before it in its row, silently. A test feeds two
#: samples packed and one alone to tiny models of many families and compares the logits; the hybrids are
#: listed for their recurrent layers without a tiny model each (turning packing off only costs speed).
PACKING_LEAKS = {"bloom", "mpt", "gpt_oss", "mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm", "jamba", "zamba",
                 "zamba2", "bamba", "nemotron_h", "falcon_h1", "granitemoehybrid", "lfm2", "qwen3_next"}


def packing_leaks(model: Any) -> str | None:
    """The model's class name when packed samples would see each other in it, else None."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) in PACKING_LEAKS:
        return type(model).__name__
    return None


class RowPackedCollator:
    """Collates packed sequences (rows with `seq_lengths`) one batch row each: `input_ids`, `labels` and
    `position_ids` (restarting at 0 at each original row), and no `attention_mask`, so the model derives
    the block-diagonal mask from the position ids. The label of each original row's first token is -100:
    it would otherwise be predicted from the end of the row before it."""

    def __init__(self, pad_token_id: int, pad_to_multiple_of: int | None = None):
        from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

        self._inner = DataCollatorForLanguageModeling(pad_token_id=pad_token_id, padding_free=False,
                                                      return_position_ids=True, pad_to_multiple_of=pad_to_multiple_of)

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        out = self._inner(examples)
        starts = out["position_ids"] == 0
        starts[:, 0] = False  # the first token of a batch row is never a label after the shift anyway
        out["labels"][starts] = -100  # padding has position 0 too: already -100
        del out["attention_mask"]  # its presence would make transformers ignore the position ids' boundaries
        return out


def keep_rows(trainer: Any, attention: str | None, log: Callable[[str], None]) -> bool:
    """Swap the padding-free collator TRL chose for packing for `RowPackedCollator`, unless the model runs
    FlashAttention (whose varlen kernel makes padding-free the faster layout). True when swapped."""
    if not getattr(trainer.args, "packing", False) or (attention or "").startswith(("flash_attention", "launchpad_varlen")):
        return False
    tok = trainer.processing_class
    pad = getattr(tok, "pad_token_id", None)
    if pad is None:
        pad = getattr(getattr(tok, "tokenizer", None), "pad_token_id", 0) or 0
    trainer.data_collator = RowPackedCollator(pad, trainer.args.pad_to_multiple_of)
    log(f"sample packing: one packed sequence per batch row ({attention or 'sdpa'} attention, a block-diagonal "
        "mask from the position ids)")
    return True
