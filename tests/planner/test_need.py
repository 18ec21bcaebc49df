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
