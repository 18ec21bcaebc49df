"""The memory estimate against published numbers (Axolotl's table for 7-8B models: QLoRA 10-14 GB,
LoRA 16-24 GB, full fine-tune 60-80 GB) and its structural properties."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launchpad.planner.memory import (
    MODEL_SHAPES,
    ModelShape,
    TrainSetup,
    estimate_memory,
    model_shape,
    read_deepspeed,
    setup_from_recipe,
)

LLAMA3_8B = "meta-llama/Meta-Llama-3-8B"


def shape_of(base_model: str, base_dir: Path | None = None) -> ModelShape:
    shape = model_shape(base_model, base_dir=base_dir)
    assert shape is not None, base_model
    return shape


def gb(adapter: str, seq: int = 2048, mbs: int = 1, world: int = 1, **kw) -> float:
    shape = shape_of(LLAMA3_8B)
    setup = TrainSetup(adapter=adapter, sequence_len=seq, micro_batch_size=mbs, gradient_checkpointing=True, **kw)
    return estimate_memory(shape, setup).per_gpu_gb(world)


def test_param_counts_match_the_published_models() -> None:
    assert shape_of(LLAMA3_8B).params == pytest.approx(8.03e9, rel=0.005)
    assert shape_of("meta-llama/Meta-Llama-3-70B-Instruct").params == pytest.approx(70.6e9, rel=0.01)
    assert shape_of("mistralai/Mistral-7B-v0.1").params == pytest.approx(7.24e9, rel=0.01)
    assert shape_of("Qwen/Qwen2-7B").params == pytest.approx(7.62e9, rel=0.01)
    assert shape_of("microsoft/Phi-3-mini-4k-instruct").params == pytest.approx(3.82e9, rel=0.01)
    # the builtin demo model (launchpad/train/tiny.py): hidden 128, 2 layers, 4 heads, 2 KV heads, vocab 1024 -> 0.56M
    tiny = shape_of("builtin:tiny-llama")
    assert (tiny.hidden, tiny.intermediate, tiny.layers, tiny.heads, tiny.kv_heads, tiny.vocab) == (
        128, 256, 2, 4, 2, 1024)
    assert tiny.params == pytest.approx(0.56e6, rel=0.01)


def test_axolotl_ranges_for_8b() -> None:
    # Axolotl's QLoRA/LoRA examples (sequence 2048, micro batch 1, gradient checkpointing, r=32 on all
    # attention projections) and its full fine-tune example (8-bit AdamW, sequence 8192).
    assert 10 <= gb("qlora", lora_r=32) <= 14
    assert 16 <= gb("lora", lora_r=32) <= 24
    assert 60 <= gb("full", seq=8192, optimizer="adamw_bnb_8bit") <= 80


def test_ordering_and_knobs_move_the_estimate_the_right_way() -> None:
    assert gb("qlora") < gb("lora") < gb("full")
    assert gb("qlora", mbs=4) > gb("qlora", mbs=1)
    shape = shape_of(LLAMA3_8B)
    no_gc = estimate_memory(shape, TrainSetup(adapter="lora", gradient_checkpointing=False)).per_gpu_gb()
    gc = estimate_memory(shape, TrainSetup(adapter="lora", gradient_checkpointing=True)).per_gpu_gb()
    assert no_gc > gc + 5
    # QLoRA checkpoints whatever the recipe says (the trainer turns it on)
    q_off = estimate_memory(shape, TrainSetup(adapter="qlora", gradient_checkpointing=False)).per_gpu_gb()
    assert q_off == pytest.approx(gb("qlora", lora_r=8))
    # AdamW fp32 states (8 bytes/param) vs 8-bit (2): a full 8B no longer fits one 80 GB GPU
    assert gb("full", optimizer="adamw_torch") > 80


def test_zero_sharding_divides_by_the_world_size() -> None:
    full1 = gb("full", optimizer="adamw_torch", zero_stage=3, world=1)
    full8 = gb("full", optimizer="adamw_torch", zero_stage=3, world=8)
    assert full8 < full1 / 4
    z2 = gb("full", optimizer="adamw_torch", zero_stage=2, world=8)
    assert full8 < z2 < full1  # stage 2 keeps the weights whole
    off = gb("full", optimizer="adamw_torch", zero_stage=3, world=8, offload_optimizer=True, offload_param=True)
    assert off < full8
    # no ZeRO: data parallel replicas each need everything
    assert gb("full", world=8) == pytest.approx(gb("full", world=1))


def test_local_config_json_wins(tmp_path: Path) -> None:
    model = tmp_path / "my-model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
        "num_key_value_heads": 4, "vocab_size": 2000, "tie_word_embeddings": True}))
    shape = shape_of(str(model))
    assert (shape.hidden, shape.layers, shape.vocab, shape.tied_embeddings) == (256, 4, 2000, True)
    assert shape_of("my-model", base_dir=tmp_path).hidden == 256
    assert shape_of(f"file://{model}").hidden == 256


def test_unknown_and_size_named_models() -> None:
    assert model_shape("s3://bucket/some-model") is None
    assert model_shape("someorg/mystery") is None
    guess = model_shape("someorg/custom-8b-sft")
    assert guess is not None and guess.params == pytest.approx(8e9, rel=0.1)
    assert "meta-llama-3-8b" in MODEL_SHAPES


def test_deepspeed_config_is_read(tmp_path: Path) -> None:
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}}))
    assert read_deepspeed(str(cfg)) == (3, True, False)
    assert read_deepspeed("configs/deepspeed/zero2.json", tmp_path / "nowhere")[0] == 2
    assert read_deepspeed(None) == (0, False, False)


def test_setup_from_recipe(write_recipe) -> None:
    r = write_recipe(adapter="lora", lora_r=16, lora_target_modules=["q_proj", "v_proj"], micro_batch_size=2)
    s = setup_from_recipe(r)
    assert (s.adapter, s.lora_r, s.lora_target_modules, s.micro_batch_size) == ("lora", 16, ("q_proj", "v_proj"), 2)
