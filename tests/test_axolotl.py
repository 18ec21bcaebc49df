"""Axolotl configs as recipes (launchpad.axolotl): every example config Axolotl ships (tests/data/axolotl, a
pinned commit) validates or is refused with a reason named per key; full fine-tunes stay full; the keys
shared with Axolotl mean what they mean there; the suggester never guesses across meanings; and an
Axolotl-style file (ShareGPT data, lora_target_linear, special_tokens, warmup_ratio, save_steps) trains
on `local` with a falling loss."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from launchpad.errors import RecipeError
from launchpad.recipe import load_recipe

REPO = Path(__file__).resolve().parent.parent
AXOLOTL = REPO / "tests" / "data" / "axolotl"
EXAMPLES = sorted(p for p in (AXOLOTL / "examples").rglob("*") if p.suffix in (".yml", ".yaml"))
GENERIC = ("see `launchpad schema`", "did you mean", "unknown key")


def outcome(path: Path):
    try:
        return load_recipe(path), []
    except RecipeError as e:
        return None, e.problems


def test_every_example_validates_or_is_refused_with_a_named_reason():
    assert len(EXAMPLES) == 252
    tally: Counter[str] = Counter()
    for path in EXAMPLES:
        raw = yaml.safe_load(path.read_text())
        recipe, problems = outcome(path)
        for line in problems:
            assert line.startswith(f"{path}: ") and not any(g in line for g in GENERIC), line
        if recipe is None:
            tally["refused"] += 1
            continue
        tally["valid"] += 1
        if not raw.get("adapter"):  # no adapter = a full fine-tune, as in Axolotl
            assert recipe.adapter == "full", path
            tally["full"] += 1
        else:
            assert recipe.adapter == ("qlora" if raw.get("load_in_4bit") else raw["adapter"]), path
        assert recipe.name and all(n.startswith(f"{path}: ") for n in recipe.notes)
    print(dict(tally))
    # what runs today (a drop means a regression; a rise, update the figure and the README's table)
    assert tally["valid"] >= 41 and tally["full"] >= 3, tally


def test_every_full_fine_tune_plans_as_full():
    from launchpad.planner.need import need_from_recipe

    for path in EXAMPLES:
        recipe, _ = outcome(path)
        if recipe is not None and recipe.adapter == "full":
            need = need_from_recipe(recipe)
            assert need.adapter == "full", path


@pytest.mark.parametrize("name, stage", [("zero1.json", 2), ("zero2.json", 2), ("zero3_bf16.json", 3),
                                         ("zero3_bf16_cpuoffload_all.json", 3)])
def test_a_deepspeed_json_elsewhere_becomes_the_preset_of_its_stage(tmp_path, name, stage):
    shipped = json.loads((AXOLOTL / "deepspeed_configs" / name).read_text())
    assert shipped["zero_optimization"]["stage"] in (1, stage)  # zero1 -> zero2: less memory, same result
    recipe = load_recipe(write(tmp_path, adapter="lora", deepspeed=f"deepspeed_configs/{name}"))
    offload = "offload" in name
    assert Path(recipe.deepspeed or "").name == f"zero{stage}" + ("-offload" if offload else "") + ".json"  # the preset
    assert any(f"deepspeed: deepspeed_configs/{name} is not beside the file" in n for n in recipe.notes)


def write(tmp_path: Path, **keys) -> Path:
    data = {"base_model": "builtin:tiny-llama", "datasets": [{"path": "tatsu-lab/alpaca", "type": "alpaca"}],
            "max_steps": 5, "output_dir": "./outputs/out", **keys}
    path = tmp_path / "axolotl-config.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_shared_keys_mean_what_they_mean_in_axolotl(tmp_path):
    r = load_recipe(write(tmp_path, adapter="lora", load_in_4bit=True, load_in_8bit=False, lora_target_linear=True,
                          attn_implementation="sdpa", warmup_ratio=0.1, save_steps=20, save_total_limit=2,
                          special_tokens={"pad_token": "<|end_of_text|>"}, optimizer="adamw_torch_8bit",
                          gradient_checkpointing="offload", strict=False, wandb_watch=None, hub_model_id="me/x",
                          sample_packing=True, val_set_size=0.05, adam_beta2=0.95, max_grad_norm=0.3))
    assert r.adapter == "qlora" and r.lora_target_modules == ["all-linear"] and r.flash_attention is False
    assert r.warmup_ratio == 0.1 and r.warmup_steps == 0 and (r.checkpoint.every_steps, r.checkpoint.keep) == (20, 2)
    assert r.special_tokens == {"pad_token": "<|end_of_text|>"} and r.optimizer == "adamw_torch_8bit"
    assert r.gradient_checkpointing is True and (r.adam_beta2, r.max_grad_norm) == (0.95, 0.3)
    assert r.name.endswith("-axolotl-config")  # <folder>-<file> when the file has no name
    notes = "\n".join(r.notes)
    assert "load_in_4bit: true with adapter: lora: adapter: qlora" in notes
    assert "ignored (they change nothing for a launch): " in notes and "hub_model_id" in notes and "strict" in notes
    assert r.sample_packing is True and r.val_set_size == 0.05
    full = load_recipe(write(tmp_path))
    assert full.adapter == "full" and any("a full fine-tune of every weight" in n for n in full.notes)


def test_epoch_cadence_templates_and_trainer_keys_carry_over(tmp_path):
    (tmp_path / "a.jsonl").write_text("")
    (tmp_path / "b.jsonl").write_text("")
    r = load_recipe(write(tmp_path, adapter="lora", saves_per_epoch=4, chat_template="llama3", evals_per_epoch=0,
                          gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False},
                          pad_to_sequence_len=True, eval_sample_packing=False,
                          datasets=[{"path": "json", "data_files": [str(tmp_path / "a.jsonl"), "b.jsonl"],
                                     "type": "chat_template", "drop_system_message": True, "ds_type": "json"},
                                    {"path": "wikitext", "name": "wikitext-103-raw-v1", "type": "completion",
                                     "field": "text", "data_files": "train/0.parquet"}]))
    assert r.checkpoint.per_epoch == 4 and r.chat_template == "llama3" and r.evals_per_epoch is None
    assert r.gradient_checkpointing_kwargs == {"use_reentrant": False}
    assert r.pad_to_sequence_len is True and r.eval_sample_packing is False
    assert [Path(d.path).name for d in r.datasets[:2]] == ["a.jsonl", "b.jsonl"]  # path: json -> the files
    assert all(d.drop_system_message and d.type == "chat" for d in r.datasets[:2])
    wiki = r.datasets[2]
    assert (wiki.path, wiki.name, wiki.field, wiki.data_files) == ("wikitext", "wikitext-103-raw-v1", "text",
                                                                   ["train/0.parquet"])
    notes = "\n".join(r.notes)
    assert "saves_per_epoch: checkpoint.per_epoch: 4" in notes and "path: json with data_files" in notes
    assert "not supported yet" not in notes, notes
    jinja = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    assert load_recipe(write(tmp_path, chat_template="jinja", chat_template_jinja=jinja)).chat_template == jinja
    own = load_recipe(write(tmp_path, base_model="google/gemma-3-1b-it", chat_template="gemma3"))
    assert own.chat_template is None and any("chat_template: gemma3: the tokenizer's own" in n for n in own.notes)
    other = load_recipe(write(tmp_path, chat_template="gemma3"))  # a gemma3 template on another model: said
    assert other.chat_template is None and any("not supported yet" in n and "gemma3" in n for n in other.notes)
    with pytest.raises(RecipeError) as err:
        load_recipe(write(tmp_path, saves_per_epoch=2, save_steps=10))
    assert any("every_steps and per_epoch are both set" in p for p in err.value.problems), err.value.problems


@pytest.mark.parametrize("keys, reason", [
    ({"rl": "dpo"}, "rl: launchpad runs supervised fine-tuning"),
    ({"fsdp": ["full_shard"]}, "fsdp: launchpad shards with DeepSpeed ZeRO: use deepspeed: zero3"),
    ({"pretraining_dataset": [{"path": "x/y"}]}, "pretraining_dataset: use a completion dataset instead"),
    ({"plugins": ["axolotl.integrations.liger.LigerPlugin"]}, "plugins: Axolotl's plugins and kernels"),
    ({"liger_rope": True}, "liger_rope: Axolotl's plugins and kernels"),
    ({"processor_type": "AutoProcessor"}, "processor_type: multimodal models are not supported"),
    ({"adapter": "qlora", "load_in_8bit": True}, "load_in_8bit: an 8-bit base goes with adapter: lora"),
    ({"adapter": "lora", "lora_model_dir": "./adapter"}, "lora_model_dir: starting from an existing adapter"),
    ({"load_in_4bit": True}, "load_in_4bit: a 4-bit base cannot be fully fine-tuned: set adapter: qlora"),
    ({"some_future_key": 3}, "some_future_key: an Axolotl key launchpad does not support"),
])
def test_refused_with_a_named_reason(tmp_path, keys, reason):
    with pytest.raises(RecipeError) as err:
        load_recipe(write(tmp_path, **keys))
    assert any(reason in line for line in err.value.problems), err.value.problems
    assert not any(g in line for line in err.value.problems for g in GENERIC), err.value.problems


def test_the_suggester_never_guesses_across_meanings(tmp_path):
    """A launchpad recipe (it has a name) with keys from Axolotl: none is "fixed" into another setting."""
    base = {"name": "mine", "base_model": "builtin:tiny-llama", "max_steps": 5,
            "datasets": [{"path": "tatsu-lab/alpaca", "type": "alpaca"}]}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({**base, "eval_steps": 50, "warmup_ratio": 0.1, "pretraining_dataset": "a/b"}))
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    (line,) = err.value.problems  # eval_steps and warmup_ratio are fields; only pretraining_dataset is refused
    assert "pretraining_dataset: use a completion dataset" in line and "learning_rate" not in line
    path.write_text(yaml.safe_dump({**base, "eval_steps": 50, "warmup_ratio": 0.1}))
    r = load_recipe(path)
    assert r.warmup_ratio == 0.1 and r.eval_steps == 50 and r.max_steps == 5
    # never a key the file already sets: `lr` would be "learning_rate", which is there
    path.write_text(yaml.safe_dump({**base, "learning_rate": 1e-4, "lr": 0.1}))
    with pytest.raises(RecipeError) as err:
        load_recipe(path)
    assert "learning_rate" not in err.value.problems[0], err.value.problems


def test_validate_prints_the_notes_and_json_carries_them(run_cli):
    path = AXOLOTL / "examples" / "llama-3" / "qlora.yml"
    proc = run_cli("validate", str(path))
    assert proc.returncode == 0 and "valid (llama-3-qlora, adapter qlora)" in proc.stdout
    assert "lora_target_linear: true: lora_target_modules" in proc.stderr and "ignored" in proc.stderr
    doc = json.loads(run_cli("validate", str(path), "--json", check=True).stdout)
    assert doc["valid"] and doc["adapter"] == "qlora" and any("saves_per_epoch: checkpoint.per_epoch: 1" in n
                                                              for n in doc["notes"])
    refused = run_cli("validate", str(AXOLOTL / "examples" / "llama-3" / "instruct-dpo-lora-8b.yml"))
    assert refused.returncode == 2 and "rl: launchpad runs supervised fine-tuning" in refused.stderr


@pytest.mark.slow
def test_an_axolotl_style_file_trains_on_local(run_cli, tmp_path):
    """No name, an 8-bit base under LoRA, ShareGPT data (conversations, from/value, human/gpt) without its system
    messages, a named chat template, lora_target_linear, special_tokens, warmup_ratio, saves_per_epoch, val_set_size +
    eval_steps, packing padded to sequence_len, non-reentrant checkpointing: the run trains, its loss falls, it
    evaluates."""
    rows = [json.loads(line) for line in (REPO / "recipes" / "data" / "smoke-chat.jsonl").read_text().splitlines()]
    names = {"user": "human", "assistant": "gpt", "system": "system"}
    sharegpt = tmp_path / "sharegpt.jsonl"
    sharegpt.write_text("".join(json.dumps({"conversations": [{"from": names[m["role"]], "value": m["content"]}
                                                              for m in r["messages"]]}) + "\n" for r in rows))
    config = {"base_model": "builtin:tiny-llama", "adapter": "lora", "load_in_8bit": True, "lora_r": 8, "lora_alpha": 16,
              "lora_target_linear": True, "lora_modules_to_save": ["embed_tokens", "lm_head"],
              "datasets": [{"path": str(sharegpt), "type": "chat_template", "field_messages": "conversations",
                            "message_property_mappings": {"role": "from", "content": "value"},
                            "drop_system_message": True}],
              "chat_template": "chatml", "pad_to_sequence_len": True, "eval_sample_packing": False,
              "gradient_checkpointing": True, "gradient_checkpointing_kwargs": {"use_reentrant": False},
              "sequence_len": 128, "micro_batch_size": 8, "learning_rate": 0.005, "max_steps": 40,
              "warmup_ratio": 0.1, "saves_per_epoch": 2, "save_total_limit": 1, "logging_steps": 1,
              "special_tokens": {"pad_token": "<|end_of_text|>"}, "output_dir": "./outputs/x", "strict": False,
              "sample_packing": True, "bf16": "auto", "tf32": True, "adam_beta2": 0.95,
              "val_set_size": 0.1, "eval_steps": 10}
    path = tmp_path / "sharegpt-lora.yml"
    path.write_text(yaml.safe_dump(config))
    proc = run_cli("up", str(path), timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "lora_target_linear: true" in proc.stderr and "ignored (they change nothing for a launch): strict" in proc.stderr
    (job,) = json.loads(run_cli("status", "--json", check=True).stdout)
    assert job["state"] == "SUCCEEDED" and job["step"] == 40 and job["name"].endswith("-sharegpt-lora")
    log = run_cli("logs", job["id"], check=True).stdout
    assert "special tokens: pad_token='<|end_of_text|>' (1 new: the embeddings grow)" in log, log[-3000:]
    losses = [float(line.split(" loss ")[1].split()[0]) for line in log.splitlines()
              if line.startswith("step ") and " eval loss " not in line]
    assert len(losses) == 40 and sum(losses[-5:]) / 5 < losses[0] * 0.6, losses
    assert "sample packing: " in log and " sequences of up to 128 tokens" in log
    assert "one packed sequence per batch row (sdpa attention" in log  # launchpad.train.packing
    assert "base model in 8-bit (bitsandbytes LLM.int8)" in log
    assert "evaluation: " in log and "rows held out" in log and "step 10/40 eval loss" in log
    assert "train_on_inputs: false: the loss covers every assistant turn and its end-of-turn marker" in log  # Axolotl's
    assert "chat template: chatml" in log
    assert "uploaded checkpoint-20 " in log and "uploaded checkpoint-40 " in log  # 2 saves in the (one) epoch
    detail = json.loads(run_cli("status", job["id"], "--json", check=True).stdout)[0]
    assert [s for s, _ in detail["eval_losses"]] == [10, 20, 30, 40], detail.get("eval_losses")  # from the store


def test_the_readme_table_is_the_one_the_code_makes():
    from launchpad.axolotl import feature_table

    readme = (REPO / "README.md").read_text()
    start = readme.index("<!-- axolotl-table:")
    table = readme[readme.index("\n", start) + 1:readme.index("<!-- /axolotl-table -->")]
    assert table == feature_table(), "README.md's Axolotl table is stale: paste launchpad.axolotl.feature_table()"


def data_has(text: str, line: str) -> bool:
    return line in text.splitlines()


def test_convert_writes_the_equivalent_recipe(run_cli, tmp_path):
    source = AXOLOTL / "examples" / "llama-3" / "qlora.yml"
    out = tmp_path / "qlora.yaml"
    proc = run_cli("convert", str(source), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "# ignored" in text and yaml.safe_load(text)["checkpoint"]["per_epoch"] == 1
    assert data_has(text, "sample_packing: true")
    data = yaml.safe_load(text)
    assert (data["name"], data["adapter"], data["lora_target_modules"]) == ("llama-3-qlora", "qlora", ["all-linear"])
    assert data["train_on_inputs"] is False and data["resources"]["gpu"].endswith("GB..")
    assert not {"load_in_4bit", "output_dir", "lora_target_linear", "attn_implementation"} & set(data)
    again = run_cli("validate", str(out))
    assert again.returncode == 0 and again.stderr.strip() == "", again.stderr  # nothing left to translate
    assert run_cli("convert", str(source), "-o", str(out)).returncode == 2  # kept without --force
    refused = run_cli("convert", str(AXOLOTL / "examples" / "llama-3" / "instruct-dpo-lora-8b.yml"))
    assert refused.returncode == 2 and "rl: launchpad runs supervised fine-tuning" in refused.stderr


def test_an_8bit_base_halves_the_weights_in_the_estimate(tmp_path):
    from launchpad.planner.memory import estimate_memory, model_shape, setup_from_recipe

    sixteen = load_recipe(write(tmp_path, adapter="lora", base_model="NousResearch/Meta-Llama-3-8B"))
    eight = load_recipe(write(tmp_path, adapter="lora", load_in_8bit=True, base_model="NousResearch/Meta-Llama-3-8B"))
    shape = model_shape("NousResearch/Meta-Llama-3-8B")
    assert shape is not None
    w16, w8 = (estimate_memory(shape, setup_from_recipe(r)).parts["weights"] for r in (sixteen, eight))
    # linear layers 1 byte instead of 2; embeddings and head are fp32 (PEFT's kbit preparation upcasts them)
    lin, other = shape.linear_params, shape.params - shape.linear_params
    assert w8 / w16 == pytest.approx((lin * 1 + other * 4) / (shape.params * 2), rel=1e-6)
    assert 0.65 < w8 / w16 < 0.75
