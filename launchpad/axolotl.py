"""Axolotl configs read as recipes: `validate`, `plan` and `up` take an Axolotl YAML file as it is.

Before a file is validated, `translate` sorts its keys the way Axolotl means them:

* **shared** keys (base_model, datasets, lora_r, optimizer, ...) mean the same in both and pass through;
* **translated** keys become launchpad's, each with one info line (`attn_implementation` ->
  `flash_attention`, `save_steps` -> `checkpoint.every_steps`, `load_in_4bit` + lora -> qlora, a
  `deepspeed_configs/zero3.json` that is not beside the file -> the zero3 preset, ...);
* **ignored** keys change nothing for a launch (`strict`, `dataset_prepared_path`, `hub_model_id`, keys set
  to nothing): one warning line lists them;
* **not yet** keys are features launchpad's trainer does not have yet (sample packing, evaluation): the run
  trains without them, and one warning line names them and what differs;
* **refused** keys would train something else than the file asks for (`rl: dpo`, FSDP, Liger kernels,
  an 8-bit base): one problem line each, saying what launchpad does instead. So does any other key of
  Axolotl's that launchpad does not know: never silently dropped.

No `adapter` is a full fine-tune, as in Axolotl (launchpad's default too).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

#: keys that change nothing for a launch (Axolotl's bookkeeping, hub pushing, dataset caching, logging knobs)
IGNORED = frozenset({
    "model_type", "tokenizer_type", "strict", "debug", "local_rank", "dataset_prepared_path", "hub_model_id",
    "hub_strategy", "push_dataset_to_hub", "wandb_watch", "wandb_log_model", "wandb_run_id", "use_wandb",
    "use_tensorboard", "remove_unused_columns", "ddp_find_unused_parameters", "save_safetensors", "save_only_model",
    "save_strategy", "loss_watchdog_threshold", "loss_watchdog_patience", "tokenizer_use_fast", "tokenizer_legacy",
    "low_cpu_mem_usage", "device_map", "max_memory", "gpu_memory_limit", "eval_batch_size", "eval_table_size",
    "eval_max_new_tokens", "experimental_skip_move_to_device", "hf_use_auth_token", "shuffle_merged_datasets",
    "dataset_processes", "dataset_num_proc", "total_num_tokens", "sample_packing_eff_est",
    "sample_packing_seq_len_multiplier", "torchdistx_path", "project_name", "branch", "use_otel_metrics",
    "otel_metrics_host", "otel_metrics_port", "group_by_length", "torch_compile", "torch_compile_mode",
    "flash_attn_cross_entropy", "flash_attn_rms_norm", "flash_attn_fuse_mlp",
    "flash_attn_fuse_qkv", "flash_optimum", "lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel", "use_kernels",
    "auto_resume_from_checkpoints", "save_first_step", "include_tokens_per_second", "dataloader_num_workers",
    "dataloader_pin_memory", "dataloader_prefetch_factor", "dataloader_drop_last",
})
#: tracker keys of trackers launchpad does not start (TensorBoard always runs; W&B and MLflow are supported)
_IGNORED_PREFIXES = ("swanlab_", "trackio_", "use_swanlab", "use_trackio", "comet_", "use_comet", "mlflow_")

#: features the run goes without (same model, different speed or no evaluation), key -> what differs
NOT_YET = {
    "eval_strategy": "no evaluation", "evaluation_strategy": "no evaluation",
    "early_stopping_patience": "no early stopping (it needs evaluation)",
    "activation_offloading": "activations stay on the GPU (more GPU memory than Axolotl needs)",
    "eot_tokens": "the tokenizer's end-of-turn token is used",
    "tokenizer_use_mistral_common": "the model's Hugging Face tokenizer is used",
}

_NOT_SFT = "launchpad runs supervised fine-tuning (TRL's SFTTrainer) only: preference and RL training are not supported"
_PARALLEL = "launchpad shards with DeepSpeed ZeRO: use deepspeed: zero3 (or zero3-offload) instead"
_KERNELS = ("Axolotl's plugins and kernels run inside Axolotl's trainer, launchpad runs TRL's SFTTrainer: remove it "
            "(launchpad's memory estimate assumes the plain model)")
_MULTIMODAL = "multimodal models are not supported: launchpad fine-tunes text models"
_NUMERICS = "not supported yet: it changes the training; remove it to train with the trainer's default"
#: keys that would train something else than asked for -> the reason, said as a problem line
REFUSED = {
    "rl": _NOT_SFT, "trl": _NOT_SFT, "reward_model": _NOT_SFT, "process_reward_model": _NOT_SFT, "orpo_alpha": _NOT_SFT,
    "rl_beta": _NOT_SFT, "center_rewards_coefficient": _NOT_SFT, "vllm": _NOT_SFT, "ebft": _NOT_SFT,
    "fsdp": _PARALLEL, "fsdp_config": _PARALLEL, "fsdp_version": _PARALLEL, "dp_shard_size": _PARALLEL,
    "dp_replicate_size": _PARALLEL, "tensor_parallel_size": _PARALLEL, "context_parallel_size": _PARALLEL,
    "expert_parallel_size": _PARALLEL, "sequence_parallel_degree": _PARALLEL, "use_ray": _PARALLEL,
    "plugins": _KERNELS, "cut_cross_entropy": _KERNELS, "use_scattermoe": _KERNELS, "use_sonicmoe": _KERNELS,
    "tiled_mlp": _KERNELS, "fused_attn_kernel": _KERNELS, "experts_implementation": _KERNELS,
    "processor_type": _MULTIMODAL, "skip_prepare_dataset": _MULTIMODAL, "freeze_mm_modules": _MULTIMODAL,
    "image_size": _MULTIMODAL, "image_resize_algorithm": _MULTIMODAL,
    "pretraining_dataset": "use a completion dataset instead: datasets: [{path: ..., type: completion}]",
    "lora_model_dir": "starting from an existing adapter is not supported (launchpad resumes its own checkpoints: "
                      "`launchpad resume JOB`)",
    "trust_remote_code": "models with remote code are not loaded (no code from the Hub runs on your instance)",
    "batch_size": "set micro_batch_size and gradient_accumulation_steps instead (batch = their product x GPUs)",
    "unfrozen_parameters": "training a subset of the weights is not supported: use adapter: lora, or a full "
                           "fine-tune (no adapter)",
    "peft_use_dora": "DoRA is not supported: use adapter: lora", "peft_use_rslora": "rsLoRA is not supported: use adapter: lora",
    "fp16": "fp16 training is not supported: use bf16: true (or auto)",
    "float16": "fp16 training is not supported: use bf16: true (or auto)",
    "bfloat16": "write bf16: true (launchpad's and Axolotl's current key)",
    "torch_dtype": "launchpad picks the dtype from bf16 and the adapter: remove it",
    "tokens": "adding tokens to the vocabulary is not supported (special_tokens can set pad/eos/bos/unk)",
    "model_config": "overriding the model's config is not supported", "tokenizer_config": "a separate tokenizer is not supported",
    "revision_of_model": "pinning a model revision is not supported yet",
}
_REFUSED_PREFIXES = {"liger_": _KERNELS, "kto_": _NOT_SFT, "dpo_": _NOT_SFT, "relora": _NUMERICS, "lisa_": _NUMERICS,
                     "gptq": "GPTQ-quantized bases are not supported: use adapter: qlora",
                     "qat": "quantization-aware training is not supported", "fp8": "FP8 training is not supported",
                     "jagged_restart": _NUMERICS, "eaft": _NUMERICS, "use_eaft": _NUMERICS, "diffusion": _NUMERICS}

_ATTENTION = {"flash_attention_2": True, "sdpa": False, "eager": False, "xformers": False}
_DEEPSPEED = (("cpuoffload", "zero3-offload"), ("offload", "zero3-offload"), ("zero3", "zero3"), ("zero2", "zero2"),
              ("zero1", "zero2"))
_DATASET_TYPES = {"chat_template": "chat", "chat_template.default": "chat", "sharegpt": "chat", "alpaca": "alpaca",
                  "completion": "completion", "chat": "chat"}
_DATASET_KEYS = {"path", "type", "split", "field_messages", "message_property_mappings", "roles", "name", "data_files",
                 "field", "drop_system_message", "roles_to_train", "train_on_eos"}


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _refusal(key: str) -> str | None:
    if key in REFUSED:
        return REFUSED[key]
    return next((why for prefix, why in _REFUSED_PREFIXES.items() if key.startswith(prefix)), None)


def translate(data: dict[str, Any], source: Path, known: set[str]) -> tuple[dict[str, Any], list[str], list[str]]:
    """(the mapping in launchpad's terms, info and warning lines, problem lines) for the top-level mapping of
    the file at `source`; `known` = launchpad's own top-level keys."""
    out = dict(data)
    axolotl = _looks_like_axolotl(data)
    notes: list[str] = []
    problems: list[str] = []
    ignored: list[str] = []
    missing: list[str] = []

    def move(key: str, to: str, value: Any, why: str = "") -> None:
        section, _, field = to.partition(".")
        if field and isinstance(out.get(section, {}), dict):
            out[section] = dict(out.get(section) or {})  # a copy: the caller's mapping stays as it was read
        target = out[section] if field else out
        if not isinstance(target, dict):
            return
        name = field or section
        if name in target and target[name] != value:
            problems.append(f"{key}: {value!r} and {to}: {target[name]!r} disagree (keep one)")
            return
        target[name] = value
        notes.append(f"{key}: {to}: {json.dumps(value)}" + (f" ({why})" if why else ""))

    # empty values are unset, as in Axolotl (a launchpad recipe's own keys are validation's to judge)
    for key in ("evals_per_epoch", "saves_per_epoch"):  # 0 per epoch = none, as in Axolotl (a falsy value)
        if axolotl and out.get(key) == 0 and not (key == "evals_per_epoch" and out.get("val_set_size")):
            out[key] = None
    for key in [k for k, v in out.items() if _empty(v) and (axolotl or k not in known)]:
        del out[key]
        if key not in known:
            ignored.append(key)
    if "name" not in out:
        slug = re.sub(r"[^a-z0-9]+", "-", f"{source.parent.name}-{source.stem}".lower()).strip("-")[:63].strip("-")
        out["name"] = slug or "axolotl-run"
        notes.append(f"name: {out['name']!r}, from the file's name (set name: to choose)")
    if "adapter" not in out:
        notes.append("adapter: not set: a full fine-tune of every weight, as in Axolotl")
    if axolotl:
        _chat_template(out, notes, missing)
    if axolotl and out.get("adapter", "full") == "full" and not out.get("deepspeed") and "fp32_master_weights" not in out:
        # Axolotl loads the weights in the training dtype and steps them directly; keep its memory footprint
        out["fp32_master_weights"] = False
        notes.append("full fine-tune without DeepSpeed: fp32_master_weights: false (Axolotl trains the 16-bit "
                     "weights directly; set it true for fp32 master weights, twice the weights' memory)")

    for key in list(out):
        if key in known:
            continue
        value = out.pop(key)
        if key == "load_in_4bit":
            if value is True and out.get("adapter") == "lora":
                out["adapter"] = "qlora"
                notes.append("load_in_4bit: true with adapter: lora: adapter: qlora (LoRA on a 4-bit base)")
            elif value is True and out.get("adapter") in (None, "full"):
                problems.append("load_in_4bit: a 4-bit base cannot be fully fine-tuned: set adapter: qlora")
        elif key in ("fp16", "float16", "bfloat16", "trust_remote_code") and value is False:
            pass  # the default: nothing to do
        elif key == "attn_implementation":
            if value in _ATTENTION:
                move(key, "flash_attention", _ATTENTION[value], "FlashAttention-2" if _ATTENTION[value] else "PyTorch SDPA")
            else:
                problems.append(f"attn_implementation: {value!r} is not supported: use flash_attention_2 or sdpa")
        elif key in ("sdp_attention", "xformers_attention") and value is True:
            move(key, "flash_attention", False, "PyTorch SDPA")
        elif key == "lora_target_linear":
            if value is True:  # Axolotl adds the listed modules to all linear ones: all-linear covers them
                out["lora_target_modules"] = ["all-linear"]
                notes.append("lora_target_linear: true: lora_target_modules: ['all-linear'] (every linear layer but "
                             "the output head, e.g. q/k/v/o_proj and gate/up/down_proj for Llama)")
        elif key == "adam_eps":
            move(key, "adam_epsilon", value)
        elif key == "save_steps":
            move(key, "checkpoint.every_steps", value)
        elif key == "saves_per_epoch":
            move(key, "checkpoint.per_epoch", value)
        elif key == "save_total_limit":
            move(key, "checkpoint.keep", value)
        elif key == "resume_from_checkpoint":
            move(key, "checkpoint.resume_from", value, "the first attempt starts from this Trainer checkpoint, with its "
                 "optimizer and step, read relative to this file's folder; later resumes use launchpad's own checkpoints")
        elif key == "output_dir":
            notes.append(f"output_dir: {value!r}: checkpoints go to the store (checkpoint.uri, the provider's by "
                         "default), complete or not at all")
        elif key in NOT_YET:
            missing.append(f"{key}: {NOT_YET[key]}")
        elif (why := _refusal(key)) is not None:
            problems.append(f"{key}: {why}")
        elif key in IGNORED or key.startswith(_IGNORED_PREFIXES):
            ignored.append(key)
        elif axolotl:  # never dropped without a word: it may change what is trained
            problems.append(f"{key}: an Axolotl key launchpad does not support (it may change the training): "
                            "remove it to train without it")
        else:
            out[key] = value  # a launchpad recipe: validation names it, with launchpad's own hints
    if "gradient_checkpointing" in out and out["gradient_checkpointing"] == "offload":
        out["gradient_checkpointing"] = True
        notes.append("gradient_checkpointing: offload: true (recomputed, not offloaded to the CPU)")
    if "train_on_inputs" not in data and axolotl:
        out["train_on_inputs"] = False
        notes.append("train_on_inputs: not set: false, as in Axolotl (the loss covers every assistant turn and its "
                     "end-of-turn marker; the rest is masked)")
    if axolotl:
        _deepspeed(out, source, notes)
    _datasets(out, notes, problems, axolotl)
    if ignored:
        notes.append(f"warning: ignored (they change nothing for a launch): {', '.join(ignored)}")
    if missing:
        notes.append(f"warning: not supported yet, the run goes without: {'; '.join(missing)}")
    return out, notes, problems


def _looks_like_axolotl(data: dict[str, Any]) -> bool:
    """An Axolotl file has no `name` (a launchpad recipe must have one) or Axolotl's own output_dir."""
    return "name" not in data or "output_dir" in data


def _chat_template(out: dict[str, Any], notes: list[str], missing: list[str]) -> None:
    """Axolotl's template names: launchpad's own (chatml, llama3, ...) pass through; `jinja` takes
    chat_template_jinja; a model family's own name on that family's model is the tokenizer's template."""
    from .train.chat_templates import MODEL_FAMILY, NAMED, is_jinja

    name, jinja = out.get("chat_template"), out.pop("chat_template_jinja", None)
    if name == "jinja" or (name is None and jinja):
        if isinstance(jinja, str) and jinja.strip():
            out["chat_template"] = jinja
            notes.append("chat_template: jinja: chat_template: the chat_template_jinja template")
        else:
            out.pop("chat_template", None)
            missing.append("chat_template: jinja without chat_template_jinja: the tokenizer's own chat template is used")
        return
    if not isinstance(name, str) or name == "tokenizer_default" or name in NAMED or is_jinja(name):
        return
    del out["chat_template"]
    model = str(out.get("base_model", "")).lower()
    if any(marker in model for marker in MODEL_FAMILY.get(name, ())):
        notes.append(f"chat_template: {name}: the tokenizer's own (Axolotl's {name} is the template of this model "
                     "family's tokenizers)")
    else:
        missing.append(f"chat_template: {name}: the tokenizer's own chat template is used (launchpad's names: "
                       f"{', '.join(NAMED)}; or chat_template: jinja with chat_template_jinja)")


def _deepspeed(out: dict[str, Any], source: Path, notes: list[str]) -> None:
    """A DeepSpeed JSON named in Axolotl's repo layout (deepspeed_configs/zero3_bf16.json) that is not beside
    the file: the built-in preset of the same stage."""
    path = out.get("deepspeed")
    if (not isinstance(path, str) or not path.startswith("deepspeed_configs/") or not path.endswith(".json")
            or (source.parent / path).is_file()):
        return
    stem = Path(path).stem.lower()
    preset = next((p for marker, p in _DEEPSPEED if marker in stem), None)
    if preset:
        out["deepspeed"] = preset
        extra = " (launchpad has no ZeRO-1 preset; ZeRO-2 needs less memory)" if "zero1" in stem else ""
        notes.append(f"deepspeed: {path} is not beside the file: the built-in {preset} preset{extra}")


def _datasets(out: dict[str, Any], notes: list[str], problems: list[str], axolotl: bool) -> None:
    """Axolotl's dataset types and keys; in a launchpad recipe what is left is validation's to name."""
    if not isinstance(out.get("datasets"), list):
        return
    entries = out["datasets"] = _local_builders(out["datasets"], notes)  # copies, as above
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        where = f"datasets[{i}]"
        kind = entry.get("type")
        if isinstance(kind, str) and kind in _DATASET_TYPES and _DATASET_TYPES[kind] != kind:
            entry["type"] = _DATASET_TYPES[kind]
            if kind == "sharegpt":  # ShareGPT's layout: conversations of {from, value}
                entry.setdefault("field_messages", "conversations")
                entry.setdefault("message_property_mappings", {"role": "from", "content": "value"})
            notes.append(f"{where}.type: {kind}: {entry['type']}")
        elif not axolotl:
            continue
        elif kind is not None and not (isinstance(kind, str) and kind in _DATASET_TYPES):
            entry.pop("type")  # said here, not again by validation
            problems.append(f"{where}.type: {kind!r} is not supported: launchpad reads chat ({{messages: [{{role, "
                            "content}]}}, or mapped with field_messages), alpaca and completion data")
        if isinstance(entry.get("data_files"), str):
            entry["data_files"] = [entry["data_files"]]
        for key in [k for k in entry if k not in _DATASET_KEYS]:
            value = entry.pop(key)
            if _empty(value):
                continue
            problems.append(f"{where}.{key}: not supported yet (launchpad reads {', '.join(sorted(_DATASET_KEYS))})")


#: Hugging Face's file-format loaders: `path: json` + `data_files` reads local files
_LOADERS = ("json", "csv", "parquet", "text")


def _local_builders(entries: list[Any], notes: list[str]) -> list[Any]:
    """`{path: json, data_files: [a.jsonl, b.jsonl]}` -> one entry per local file; `ds_type` (the format of a
    local path) is the file's suffix's business."""
    out: list[Any] = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            out.append(entry)
            continue
        entry = dict(entry)
        entry.pop("ds_type", None)
        files = entry.get("data_files")
        if entry.get("path") in _LOADERS and files:
            files = [files] if isinstance(files, str) else list(files)
            loader = entry.pop("path")
            entry.pop("data_files")
            out += [{**entry, "path": f} for f in files]
            notes.append(f"datasets[{i}]: path: {loader} with data_files: path: {', '.join(map(str, files))} "
                         "(the local files themselves)")
        else:
            out.append(entry)
    return out


#: keys with the same name and meaning in both (launchpad's recipe fields)
SHARED = ("base_model", "base_model_config", "load_in_8bit", "datasets", "sequence_len", "micro_batch_size",
          "gradient_accumulation_steps",
          "num_epochs", "max_steps", "learning_rate", "lr_scheduler", "warmup_steps", "warmup_ratio", "weight_decay", "optimizer",
          "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "adapter", "lora_r", "lora_alpha",
          "lora_dropout", "lora_target_modules", "lora_modules_to_save", "bf16", "tf32", "gradient_checkpointing",
          "gradient_checkpointing_kwargs", "flash_attention", "special_tokens", "sample_packing", "eval_sample_packing",
          "pad_to_sequence_len", "chat_template", "train_on_inputs", "val_set_size", "eval_steps",
          "evals_per_epoch", "seed", "logging_steps", "deepspeed", "wandb_project", "wandb_entity", "wandb_name")
#: what `translate` turns into launchpad's keys (documentation of the branches above, for the README)
TRANSLATED = (
    ("no `adapter`", "`adapter: full` (a full fine-tune)"),
    ("a full fine-tune without `deepspeed`", "`fp32_master_weights: false` (Axolotl steps the 16-bit weights)"),
    ("`load_in_4bit: true` + `adapter: lora`", "`adapter: qlora`"),
    ("`attn_implementation: flash_attention_2` / `sdpa`, `eager`, `xformers`", "`flash_attention: true` / `false`"),
    ("`lora_target_linear: true`", "`lora_target_modules: [all-linear]` (PEFT: every linear layer but the head)"),
    ("`save_steps`, `saves_per_epoch`, `save_total_limit`", "`checkpoint.every_steps`, `checkpoint.per_epoch`, "
     "`checkpoint.keep`"),
    ("`chat_template: jinja` + `chat_template_jinja`", "`chat_template:` the template itself"),
    ("`chat_template:` a model family's name (`gemma3`, `llama4`, `qwen3`, ...) on that family's model",
     "the tokenizer's own (the same template)"),
    ("`output_dir`", "dropped: checkpoints go to `checkpoint.uri` (the provider's store by default)"),
    ("`resume_from_checkpoint: ./out/checkpoint-N`", "`checkpoint.resume_from:` the first attempt starts from that "
     "Trainer checkpoint (weights, optimizer, step); later resumes from launchpad's own"),
    ("`deepspeed: deepspeed_configs/zero*.json` (not beside the file)", "the preset of its stage: `zero2`, `zero3`, "
     "`zero3-offload` (ZeRO-1 -> `zero2`)"),
    ("`gradient_checkpointing: offload`", "`gradient_checkpointing: true`"),
    ("`adam_eps`", "`adam_epsilon`"),
    ("datasets `type: chat_template`, `chat_template.default`, `sharegpt`", "`type: chat` (with `field_messages`, "
     "`message_property_mappings`, `roles`, `drop_system_message`; ShareGPT's human/gpt understood)"),
    ("dataset `name`, `data_files`, `field`, `roles_to_train`, `train_on_eos`", "the same (a Hub dataset's "
     "configuration and files; completion's text column; the roles and end-of-turn markers in the loss)"),
    ("no `name`", "`name` from the file's folder and name"),
    ("no `train_on_inputs`", "`train_on_inputs: false` (Axolotl's default: every assistant turn trained, the rest masked)"),
    ("a key set to nothing", "unset"),
)


def feature_table() -> str:
    """The README's table of what carries over (tests/test_axolotl.py keeps the README equal to it)."""
    def keys(names) -> str:
        return ", ".join(f"`{n}`" for n in names)

    rows = ["| Axolotl | launchpad |", "|---|---|", f"| {keys(SHARED)} | the same keys, the same meaning |"]
    rows += [f"| {a} | {b} |" for a, b in TRANSLATED]
    rows += [f"| `{k}` | not supported yet, the run goes without it: {why} |" for k, why in NOT_YET.items()]
    rows.append(f"| {keys(sorted(IGNORED))}, `{'*`, `'.join(_IGNORED_PREFIXES)}*` | ignored (one warning line) |")
    by_reason: dict[str, list[str]] = {}
    for key, why in [*REFUSED.items(), *((f"{p}*", w) for p, w in _REFUSED_PREFIXES.items())]:
        by_reason.setdefault(why, []).append(key)
    rows += [f"| {keys(names)} | refused: {why} |" for why, names in by_reason.items()]
    rows.append("| any other key | refused: named, never dropped without a word |")
    return "\n".join(rows) + "\n"
