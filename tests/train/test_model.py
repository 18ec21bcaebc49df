"""lora_target_modules as one regular expression (Axolotl's and PEFT's form): validated when the recipe
loads, applied by PEFT to the whole dotted module names, sized by the planner from the names it selects."""

from __future__ import annotations

import pytest

from launchpad.errors import BadInput, RecipeError
from launchpad.planner.memory import lora_trainable_params, setup_from_recipe, targets_of_pattern
from launchpad.recipe import Recipe, load_recipe

MULTIMODAL = r"model.language_model.layers.[\d]+.(mlp|cross_attn|self_attn).(up|down|gate|q|k|v|o)_proj"


def recipe(tmp_path, targets: str) -> Recipe:
    (tmp_path / "train.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    path = tmp_path / "r.yaml"
    path.write_text(f"name: rx\nbase_model: builtin:tiny-llama\nadapter: lora\nmax_steps: 2\n"
                    f"lora_target_modules: {targets}\ndatasets: [{{path: train.jsonl, type: chat}}]\n")
    return load_recipe(path)


def test_a_regular_expression_is_kept_and_all_linear_is_the_list(tmp_path):
    rx = r"model.layers.\d+.self_attn.(q|v)_proj"
    assert recipe(tmp_path, f"'{rx}'").lora_target_modules == rx
    assert recipe(tmp_path, "all-linear").lora_target_modules == ["all-linear"]


def test_a_broken_expression_names_the_field_and_the_fix(tmp_path):
    with pytest.raises(RecipeError) as e:
        recipe(tmp_path, "'self_attn.(q|v_proj'")
    assert "lora_target_modules" in str(e.value) and "not a regular expression" in str(e.value)
    assert "[q_proj, v_proj]" in str(e.value)


def test_the_planner_counts_the_modules_the_expression_selects():
    assert targets_of_pattern(MULTIMODAL) == ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert targets_of_pattern(r".*\.(q|v)_proj") == ("q_proj", "v_proj")
    assert targets_of_pattern(r"model.layers.\d+.mlp.down_proj") == ("down_proj",)
    assert targets_of_pattern("q_proj") == ()  # a whole-name match, as PEFT does: a bare name is not a suffix


def test_plan_sizes_the_adapter_from_the_expression(tmp_path):
    from launchpad.planner.shapes import resolve_shape

    shape = resolve_shape("meta-llama/Llama-3.1-8B")
    qv = setup_from_recipe(recipe(tmp_path, r"'.*\.(q|v)_proj'"))
    assert qv.lora_target_modules == ("q_proj", "v_proj")
    listed = setup_from_recipe(recipe(tmp_path, "[q_proj, v_proj]"))
    assert lora_trainable_params(shape, 8, qv.lora_target_modules) == lora_trainable_params(shape, 8, listed.lora_target_modules)


def _built(tmp_path, targets: str):
    from launchpad.train.model import Precision, build_model
    from launchpad.train.tiny import ensure_tiny_llama

    lines: list[str] = []
    r = recipe(tmp_path, targets)
    model, _tok, peft_config = build_model(r, str(ensure_tiny_llama(tmp_path / "tiny")), Precision(False, False),
                                           log=lines.append)
    return model, peft_config, lines


def test_peft_adapts_exactly_the_modules_the_expression_matches(tmp_path):
    from peft import get_peft_model

    model, config, lines = _built(tmp_path, r"'model.layers.\d+.self_attn.(q|v)_proj'")
    assert config.target_modules == r"model.layers.\d+.self_attn.(q|v)_proj"
    layers = model.config.num_hidden_layers
    assert f"lora_target_modules: 'model.layers.\\\\d+.self_attn.(q|v)_proj' selects {2 * layers} modules" in lines[-1]
    adapted = {n.split(".lora_A")[0] for n, _ in get_peft_model(model, config).named_parameters() if "lora_A" in n}
    assert len(adapted) == 2 * layers and all(n.endswith(("q_proj", "v_proj")) for n in adapted)


def test_an_expression_that_matches_nothing_is_refused_before_training(tmp_path):
    with pytest.raises(BadInput, match="matches no module of builtin:tiny-llama .*e.g. 'model.layers.0.self_attn.q_proj'"):
        _built(tmp_path, "'q_proj'")
