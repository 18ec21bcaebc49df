"""adapter: qlora for real on CPU (bitsandbytes 4-bit NF4 + LoRA through TRL), the 8B recipe, and the
trainer's default optimizer agreeing with the planner's memory model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from trainrun import (
    REPO,
    extensions_dir,
    losses,
    run,
    status_of,
    step_lines,
    trainer_env,
    write_spec,
)

from launchpad.storage import open_store
from launchpad.storage.checkpoints import (
    download_checkpoint,
    latest_checkpoint,
    list_checkpoints,
)


@pytest.fixture(scope="module")
def env(tmp_path_factory, pytestconfig) -> dict[str, str]:
    return trainer_env(tmp_path_factory.mktemp("lp-home"), extensions_dir(pytestconfig, tmp_path_factory))


@pytest.mark.slow
def test_qlora_trains_on_a_4bit_base_and_resumes(tmp_path, env):
    pytest.importorskip("bitsandbytes")
    spec = write_spec(tmp_path, "smoke-qlora", "qlora-1", max_steps=12, overrides={"checkpoint.every_steps": 6})
    rc, log = run(tmp_path, env)
    assert rc == 0, log
    assert "adapter qlora" in log and "optimizer paged_adamw_8bit" in log
    assert "paging needs a CUDA GPU; on CPU it runs unpaged" in log
    assert log.count("attention: sdpa") == 1  # said once
    status = status_of(spec)
    first = losses(status)
    assert status["phase"] == "done" and status["step"] == 12
    assert first[1] > 6.0 and first[12] < 3.2 and first[12] < first[1] / 2

    env_json = json.loads((Path(spec["workdir"]) / "env.json").read_text())
    assert env_json["versions"]["bitsandbytes"] and env_json["versions"]["torch"] and env_json["problems"] == []
    assert env_json["cuda_available"] is False

    store = open_store(spec["checkpoint_uri"])
    ckpt = download_checkpoint(store, latest_checkpoint(store, "qlora-1"), tmp_path / "ckpt")
    names = {p.name for p in ckpt.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "tokenizer.json", "tokenizer_config.json"} <= names
    adapter = json.loads((ckpt / "adapter_config.json").read_text())
    assert adapter["r"] == 8 and set(adapter["target_modules"]) == {"q_proj", "k_proj", "v_proj", "o_proj"}

    # Resume: the same job asked for 16 steps continues from checkpoint-12, not from scratch.
    spec = write_spec(tmp_path, "smoke-qlora", "qlora-1", max_steps=16, overrides={"checkpoint.every_steps": 6})
    rc, log = run(tmp_path, env)
    assert rc == 0, log
    assert "resuming qlora-1 from checkpoint-12" in log
    assert step_lines(log)[0] == 13
    status = status_of(spec)
    after = losses(status)
    assert status["step"] == 16 and status["resumed_from"]["step"] == 12
    assert all(after[s] == pytest.approx(first[s]) for s in range(1, 13))  # the curve carried over
    assert max(after[s] for s in range(13, 17)) < first[1] / 2  # picked up where it was, no restart
    assert [r.step for r in list_checkpoints(store, "qlora-1")] == [12, 16]


def test_qlora_8b_recipe_validates_and_plans(run_cli):
    proc = run_cli("validate", "recipes/qlora-8b.yaml", "--json")
    assert proc.returncode == 0, proc.stderr
    from launchpad.recipe import load_recipe

    r = load_recipe(REPO / "recipes" / "qlora-8b.yaml")
    assert (r.adapter, r.lora_r, r.lora_alpha, r.lora_dropout, r.lora_target_modules) == (
        "qlora", 64, 16, 0.05, ["q_proj", "v_proj"])
    assert (r.learning_rate, r.micro_batch_size, r.gradient_accumulation_steps, r.num_epochs) == (2e-4, 4, 8, 3)
    assert r.bf16 is True and r.checkpoint.every_steps == 100 and r.optimizer == "paged_adamw_8bit"
    plan = run_cli("plan", "recipes/qlora-8b.yaml", "--json")
    assert plan.returncode == 1, plan.stderr  # no configured provider here has a 40 GB GPU: exit 1, still a plan
    need = json.loads(plan.stdout)["need"]
    assert 10 < need["vram_gb_per_gpu"] < 40  # fits the A100-40GB the guides use


def test_default_optimizer_is_the_one_the_planner_assumes():
    from launchpad.planner.settings import planner_settings
    from launchpad.train.model import DEFAULT_OPTIMIZER

    assert DEFAULT_OPTIMIZER == planner_settings()["memory"]["optimizer"]


def test_the_qlora_model_runs_its_residual_stream_in_fp32(tmp_path):
    """What the memory estimate's `fp32_residual` (set by setup_from_recipe for launchpad's kbit runs) rests on:
    launchpad's QLoRA model, as TRL 1.x trains it (trainable params in bf16, nothing else cast back), carries
    fp32 between its decoder layers under bf16 autocast, because PEFT's kbit preparation leaves the embeddings
    and norms in fp32 and bitsandbytes returns each linear's output in its input's dtype. Were the trainer to
    keep bf16 there, this fails: turn `fp32_residual` off in setup_from_recipe with it."""
    import torch
    from peft import get_peft_model

    from launchpad.planner.memory import setup_from_recipe
    from launchpad.recipe import load_recipe
    from launchpad.train.model import Precision, build_model
    from launchpad.train.tiny import ensure_tiny_llama

    recipe = load_recipe(REPO / "recipes" / "smoke-qlora.yaml").model_copy(update={"lora_modules_to_save": None})
    assert setup_from_recipe(recipe).fp32_residual
    model, _, peft_config = build_model(recipe, str(ensure_tiny_llama(tmp_path)), Precision(bf16=True, fp16=False),
                                        log=lambda _: None)
    model = get_peft_model(model, peft_config)
    for p in model.parameters():
        if p.requires_grad:  # what TRL's SFTTrainer does to a quantised model's trainable params
            p.data = p.data.to(torch.bfloat16)
    seen: dict[str, torch.dtype] = {}
    layers = model.base_model.model.model.layers

    def record(name):
        def hook(module, args, out) -> None:
            seen.setdefault(name, out.dtype if torch.is_tensor(out) else out[0].dtype)
        return hook

    def layer_input(module, args, kwargs) -> None:
        seen.setdefault("layer input", (args[0] if args else kwargs["hidden_states"]).dtype)

    layers[0].register_forward_pre_hook(layer_input, with_kwargs=True)
    layers[0].post_attention_layernorm.register_forward_hook(record("norm"))
    layers[0].mlp.up_proj.register_forward_hook(record("mlp"))
    layers[-1].register_forward_hook(record("last layer output"))
    model.base_model.model.lm_head.register_forward_hook(record("logits"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(input_ids=torch.tensor([[1, 5, 9, 2]]))
    assert seen == {"layer input": torch.float32, "norm": torch.float32, "mlp": torch.float32,
                    "last layer output": torch.float32, "logits": torch.bfloat16}, seen
