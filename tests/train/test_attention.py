"""The attention kernel fits the model's class: transformers refuses to load a model with an implementation
its class lacks, so BLOOM (neither FlashAttention-2 nor SDPA) failed at load, after the machine had booted.
Now it trains with eager attention, the log says why, and the plan counts eager attention's memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launchpad.planner.memory import estimate_memory, setup_from_recipe
from launchpad.planner.shapes import _EAGER_ONLY, _FLASH_NOT_SDPA, resolve_shape
from launchpad.recipe import load_recipe
from launchpad.train.model import attention_support, fit_attention
from launchpad.train.tiny import ensure_tiny_llama

REPO = Path(__file__).resolve().parents[2]
ATTENTION_FREE = {"mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm"}


@pytest.fixture(scope="module")
def tiny_bloom(tmp_path_factory) -> Path:
    """A random-init 2-layer BLOOM with the builtin tiny Llama's tokenizer, saved as a local model folder."""
    from transformers import AutoTokenizer, BloomConfig, BloomForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(ensure_tiny_llama(tmp_path_factory.mktemp("tiny")))
    path = tmp_path_factory.mktemp("tiny-bloom")
    BloomForCausalLM(BloomConfig(vocab_size=len(tokenizer), hidden_size=64, n_layer=2, n_head=4)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_each_kernel_steps_down_to_one_the_class_has(tiny_bloom, tmp_path) -> None:
    assert attention_support(str(tiny_bloom)) == ("BloomForCausalLM", False, False)
    llama = attention_support(str(ensure_tiny_llama(tmp_path)))
    assert llama == ("LlamaForCausalLM", True, True)
    bloom = attention_support(str(tiny_bloom))
    assert fit_attention("flash_attention_2", "compute capability 9.0", bloom)[0] == "eager"
    attn, why = fit_attention("sdpa", "no CUDA GPU", bloom)
    assert attn == "eager" and "BloomForCausalLM has no SDPA" in why and "square of sequence_len" in why
    assert fit_attention("flash_attention_2", "compute capability 9.0", ("Gemma3ForCausalLM", False, True)) == (
        "sdpa", "Gemma3ForCausalLM has no FlashAttention-2 in transformers")
    assert fit_attention("flash_attention_2", "ok", llama) == ("flash_attention_2", "ok")
    assert fit_attention("sdpa", "no CUDA GPU", None) == ("sdpa", "no CUDA GPU")  # cannot tell: unchanged
    assert attention_support(str(tmp_path / "nothing here")) is None


@pytest.mark.slow  # a real trainer run (~10 s)
def test_a_bloom_base_trains_with_eager_attention_and_unpacked_rows(tiny_bloom, tmp_path) -> None:
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data.update(base_model=str(tiny_bloom), max_steps=30, lora_target_modules=["query_key_value"],
                lora_modules_to_save=["word_embeddings"], sample_packing=True)
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(data))
    recipe = load_recipe(tmp_path / "r.yaml")
    spec = {"job_id": "bloom-1", "recipe": recipe.model_dump(mode="json"), "checkpoint_uri": (tmp_path / "store").as_uri(),
            "workdir": str(tmp_path / "work"), "status_path": str(tmp_path / "work" / "status.json")}
    (tmp_path / "job.json").write_text(json.dumps(spec))
    env = {**os.environ, "LAUNCHPAD_HOME": str(tmp_path / "home"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "launchpad.train", "--spec", str(tmp_path / "job.json")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert "attention: eager (BloomForCausalLM has no SDPA in transformers" in log
    # ALiBi ignores the position ids that keep packed samples apart: padded rows instead, and the log says so
    assert "sample packing: off, BloomForCausalLM does not keep packed samples apart" in log
    assert "sample packing: " not in log.replace("sample packing: off", "")
    losses = [float(v) for _, v in json.loads((tmp_path / "work" / "status.json").read_text())["losses"]]
    assert len(losses) == 30 and sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.5, losses


def test_the_plan_counts_eager_attention_for_bloom(tmp_path) -> None:
    (tmp_path / "train.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    path = tmp_path / "r.yaml"
    path.write_text("name: b\nbase_model: bigscience/bloomz-7b1\nadapter: lora\nsequence_len: 4096\nmax_steps: 2\n"
                    "datasets: [{path: train.jsonl, type: chat}]\n")
    recipe = load_recipe(path)
    shape = resolve_shape(recipe.base_model)
    assert shape.attention_kernels == ""
    acts = next(t for t in estimate_memory(shape, setup_from_recipe(recipe)).terms if t.name == "activations")
    assert "eager softmax" in acts.formula and "no FlashAttention-2 or SDPA for this architecture" in acts.formula
    flash = estimate_memory(resolve_shape("meta-llama/Llama-2-7b-hf"), setup_from_recipe(recipe))
    assert "eager" not in next(t for t in flash.terms if t.name == "activations").formula
    # Gemma-2 has FlashAttention-2 but no SDPA: eager unless the recipe insists on FlashAttention-2
    gemma2 = resolve_shape("google/gemma-2-2b")
    assert gemma2.attention_kernels == "flash"
    auto = next(t for t in estimate_memory(gemma2, setup_from_recipe(recipe)).terms if t.name == "activations")
    assert "flash_attention is not true" in auto.formula
    insist = load_recipe(path, overrides={"flash_attention": True})
    assert "eager" not in next(t for t in estimate_memory(gemma2, setup_from_recipe(insist)).terms
                               if t.name == "activations").formula


def test_the_eager_only_list_matches_transformers_for_every_bundled_architecture() -> None:
    """configs/model_shapes.yaml's model types (and BLOOM's and MPT's): in `_EAGER_ONLY` exactly when the
    installed transformers has neither FlashAttention-2 nor SDPA for the class. Attention-free families
    (Mamba, RWKV) have no attention to count; the trainer loads them with eager all the same."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    table = yaml.safe_load((REPO / "configs" / "model_shapes.yaml").read_text())
    types = {"bloom", "mpt"} | {str(v) for v in _values(table, "model_type")}
    checked = 0
    for mtype in sorted(types):
        name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(mtype)
        if not name or not hasattr(transformers, name) or mtype in ATTENTION_FREE:
            continue
        cls = getattr(transformers, name)
        sdpa, flash = getattr(cls, "_supports_sdpa", False), getattr(cls, "_supports_flash_attn", False)
        assert (mtype in _EAGER_ONLY) == (not sdpa and not flash), mtype
        assert (mtype in _FLASH_NOT_SDPA) == (flash and not sdpa), mtype
        checked += 1
    assert checked >= 30


def _values(node, key: str):
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield v
            else:
                yield from _values(v, key)
    elif isinstance(node, list):
        for v in node:
            yield from _values(v, key)
