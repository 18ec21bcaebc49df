"""What a recipe needs (launchpad.planner.need): recipe errors the plan can see before any machine boots."""

from __future__ import annotations

import pytest

from launchpad.errors import RecipeError
from launchpad.planner.need import need_from_recipe


def test_lora_on_an_attention_free_model_needs_its_targets_named(write_recipe) -> None:
    """LoRA's default targets are the attention projections: on Mamba that adapts nothing, and PEFT fails on
    the booted machine. The plan says so first, with targets PEFT accepts (not its out_proj, so not all-linear)."""
    with pytest.raises(RecipeError) as e:
        need_from_recipe(write_recipe(base_model="state-spaces/mamba-2.8b", adapter="lora"))
    assert "lora_target_modules" in str(e.value) and "[in_proj, x_proj]" in str(e.value)
    named = need_from_recipe(write_recipe(base_model="state-spaces/mamba-2.8b", adapter="lora",
                                          lora_target_modules=["in_proj", "x_proj"]))
    assert named.vram_gb and named.vram_gb > 0
    assert need_from_recipe(write_recipe(base_model="state-spaces/mamba-2.8b", adapter="full")).vram_gb


def test_the_plan_says_when_the_trainer_will_turn_packing_off(write_recipe) -> None:
    """BLOOM (ALiBi) ignores the position ids that keep packed samples apart: launchpad.train.packing turns
    packing off for it, and the plan says so beforehand."""
    bloom = need_from_recipe(write_recipe(base_model="bigscience/bloomz-7b1", adapter="lora", sample_packing=True))
    assert any(n.startswith("sample_packing: bloom models let packed samples see each other") for n in bloom.notes)
    llama = need_from_recipe(write_recipe(adapter="lora", sample_packing=True))
    assert not any("sample_packing" in n for n in llama.notes)
