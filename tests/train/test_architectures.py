"""The trainer's model set-up (launchpad.train.model.build_model) on a tiny random-init model of each family
people fine-tune, then one forward and backward pass through the adapter: what fails here would fail on a
booted, billing machine (an attention kernel the class lacks, LoRA targets the architecture does not have).
Whole training runs of a few of them: tests/train/test_attention.py (BLOOM), test_trainer.py (Llama)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from launchpad.recipe import load_recipe
from launchpad.train.model import Precision, attention_support, build_model, fit_attention
from launchpad.train.packing import PACKING_LEAKS, packing_leaks
from launchpad.train.tiny import ensure_tiny_llama

DIMS: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
FAMILIES: dict[str, dict[str, Any]] = {  # model_type: config keys beside the tokenizer's vocabulary
    "gemma2": {**DIMS, "num_key_value_heads": 2, "head_dim": 16},
    "gemma3_text": {**DIMS, "num_key_value_heads": 2, "head_dim": 16},
    "qwen3_moe": {**DIMS, "num_key_value_heads": 2, "head_dim": 16, "moe_intermediate_size": 32, "num_experts": 4,
                  "num_experts_per_tok": 2},
    "mixtral": {**DIMS, "num_key_value_heads": 2, "num_local_experts": 4},
    "phi3": {**DIMS, "num_key_value_heads": 4, "pad_token_id": 0},
    "falcon": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4},
    "gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 4},
    "bloom": {"hidden_size": 64, "n_layer": 2, "n_head": 4},
    "mpt": {"d_model": 64, "n_layers": 2, "n_heads": 4},
    "gpt_oss": {**DIMS, "intermediate_size": 64, "num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 4,
                "num_experts_per_tok": 2, "layer_types": ["sliding_attention", "full_attention"]},
    "deepseek_v3": {**DIMS, "moe_intermediate_size": 32, "num_key_value_heads": 4, "n_routed_experts": 4,
                    "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "first_k_dense_replace": 1,
                    "q_lora_rank": None, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
                    "v_head_dim": 16},
    "mamba": {"hidden_size": 64, "num_hidden_layers": 2, "state_size": 8},
}
#: LoRA targets where the default (the attention projections) does not apply
TARGETS = {"mamba": ["in_proj", "x_proj"]}  # its dt_proj weight is read directly: LoRA there would train nothing


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(ensure_tiny_llama(tmp_path_factory.mktemp("tiny")))


def tiny_model(family: str, tokenizer, tmp_path: Path) -> Path:
    """A random-init 2-layer model of `family` with the tiny Llama's tokenizer, saved as a local folder."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model_dir = tmp_path / family
    config = AutoConfig.for_model(family, vocab_size=len(tokenizer), **FAMILIES[family])
    AutoModelForCausalLM.from_config(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    return model_dir


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_packed_samples_see_only_themselves_except_in_the_families_where_packing_is_turned_off(
        family, tokenizer, tmp_path) -> None:
    """Two samples packed in one row (position ids restarting, no attention mask: RowPackedCollator's batch)
    against the second alone: the same logits, or the family is in PACKING_LEAKS (the trainer then trains on
    padded rows)."""
    import torch
    from transformers import AutoModelForCausalLM

    model_dir = tiny_model(family, tokenizer, tmp_path)
    attn, _ = fit_attention("sdpa", "", attention_support(str(model_dir)))
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation=attn).eval()
    first, second = torch.randint(5, len(tokenizer), (1, 7)), torch.randint(5, len(tokenizer), (1, 5))
    with torch.no_grad():
        packed = model(input_ids=torch.cat([first, second], 1), use_cache=False,
                       position_ids=torch.cat([torch.arange(7), torch.arange(5)]).unsqueeze(0)).logits[0, 7:]
        alone = model(input_ids=second, position_ids=torch.arange(5).unsqueeze(0), use_cache=False).logits[0]
    leaks = not torch.allclose(packed, alone, atol=1e-4)
    assert leaks == (family in PACKING_LEAKS) and (packing_leaks(model) is not None) == leaks, (family, leaks)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_loads_with_its_adapter_and_takes_a_gradient_step(family, tokenizer, tmp_path) -> None:
    import torch
    from peft import get_peft_model

    model_dir = tiny_model(family, tokenizer, tmp_path)
    (tmp_path / "train.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    recipe_file = tmp_path / "r.yaml"
    fields = {"name": "arch", "base_model": str(model_dir), "adapter": "lora", "max_steps": 1,
              "datasets": [{"path": "train.jsonl", "type": "chat"}]}
    if family in TARGETS:
        fields["lora_target_modules"] = TARGETS[family]
    recipe_file.write_text(yaml.safe_dump(fields))
    said: list[str] = []
    model, _, peft_config = build_model(load_recipe(recipe_file), str(model_dir), Precision(bf16=False, fp16=False),
                                        log=said.append)
    model = get_peft_model(model, peft_config)
    ids = torch.tensor([tokenizer("hello world, a short sample")["input_ids"]])
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if p.requires_grad]
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert torch.isfinite(loss) and grads and not missing, (family, missing)
    assert any(line.startswith("attention: ") for line in said), said


def test_the_families_here_cover_every_attention_case() -> None:
    """Families with FlashAttention-2 only, with neither kernel, and with no attention at all are among them."""
    from launchpad.planner.shapes import _EAGER_ONLY, _FLASH_NOT_SDPA

    assert {"bloom", "mpt"} <= set(FAMILIES) & _EAGER_ONLY and {"gemma2", "gpt_oss"} <= set(FAMILIES) & _FLASH_NOT_SDPA
    assert "mamba" in FAMILIES
