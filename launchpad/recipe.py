"""Recipes: pydantic models of recipes/*.yaml, and the loader that turns a file into a `Recipe`.

Training keys use Axolotl's names so an Axolotl config ports over; launchpad's own sections are
`resources`, `checkpoint`, `autostop` and `env`.

`load_recipe(path)` is the front door: it reads the file safely (launchpad.yamlsafe), applies overrides,
validates, resolves relative paths against the recipe's folder and checks that local files exist. Every
problem becomes one line ``<file>: <field>: <what> (<fix>)`` of a RecipeError. Validating a dict with
`Recipe.model_validate` checks the shape only (no file-system access): that is what the agent does with
the recipe it finds in job.json on a machine where the client's paths do not exist.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ._recipe_errors import apply_overrides, format_errors
from ._recipe_fields import (
    BUILTIN_MODELS,
    CUDA_VERSION,
    ENV_REF,
    NAME_PATTERN,
    OPTIMIZERS,
    EnvName,
    EnvValue,
    ProviderName,
    Region,
    check_base_model,
    check_checkpoint_uri,
    check_dataset_path,
    check_deepspeed,
    check_gpu,
    check_name,
    check_resume_from,
    number_as_text,
    true_false_or_auto,
    validation_context,
)
from .errors import RecipeError
from .gpuspec import GpuSpec, parse_gpu_spec
from .train.chat_templates import NAMED as NAMED_TEMPLATES
from .train.chat_templates import is_jinja
from .yamlsafe import YamlError, read_yaml_mapping

# ---- the models ------------------------------------------------------------------------------

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Dataset(_Strict):
    """One training data source."""

    path: str = Field(description=(
        "A local file (.jsonl .json .parquet .csv .txt; relative to the recipe's folder), a folder of them, "
        "a store URI (s3:// gs:// az:// file://) or a Hugging Face dataset id ('org/name')."))
    type: Literal["chat", "alpaca", "completion"] = Field("chat", description=(
        "chat: {messages: [{role, content}]}; alpaca: {instruction, input, output}; completion: {text}."))
    split: str = Field("train", pattern=r"^[A-Za-z0-9_.-]{1,64}(\[[0-9:%\s-]{1,32}\])?$", description=(
        "A Hugging Face dataset's split, slices included ('train[:10%]', 'train[:1000]'); a local file is one split."))
    field_messages: str = Field("messages", min_length=1, max_length=64, description=(
        "chat: the column holding the conversation (ShareGPT files: 'conversations'; Axolotl's key)."))
    message_property_mappings: dict[Literal["role", "content"], str] = Field(default_factory=dict, description=(
        "chat: the message keys for role and content, e.g. {role: from, content: value} (ShareGPT; Axolotl's key)."))
    roles: dict[Literal["system", "user", "assistant", "tool"], list[str]] = Field(default_factory=dict, description=(
        "chat: the role names of the data for each standard role, e.g. {user: [human], assistant: [gpt]} "
        "(these two are understood without it; Axolotl's key)."))
    drop_system_message: bool = Field(False, description="chat: leave out system messages (Axolotl's key).")
    roles_to_train: list[Literal["system", "user", "assistant", "tool"]] | None = Field(None, min_length=1, description=(
        "chat/alpaca with train_on_inputs: false: the roles whose turns are in the loss (Axolotl's key; "
        "default [assistant])."))
    train_on_eos: Literal["turn", "last", "all", "none"] | None = Field(None, description=(
        "chat/alpaca with train_on_inputs: false: which end-of-turn markers are in the loss (Axolotl's key): "
        "turn (default: each trained turn's), last (the last trained turn's), all (every turn's), none."))
    field: str = Field("text", min_length=1, max_length=64, description=(
        "completion: the column holding the text (Axolotl's key)."))
    name: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,128}$", description=(
        "A Hugging Face dataset's configuration ('wikitext-103-raw-v1'; `load_dataset(path, name)`)."))
    data_files: list[Annotated[str, Field(min_length=1, max_length=512)]] | None = Field(None, min_length=1,
        description=(
            "A Hugging Face dataset's files to read, relative to the dataset repository (`load_dataset(path, "
            "data_files=...)`; Axolotl's key)."))

    _path = field_validator("path")(check_dataset_path)


class Resources(_Strict):
    """What the job needs from a machine; the planner filters offers on it."""

    gpu: str | None = Field(None, description=(
        "GPUs per node in dstack's spec style: 'A100', 'H100:80GB:8', '24GB..', 'A100,H100:2..8'. "
        "Leave out for a CPU-only job."))
    nodes: int = Field(1, ge=1, le=1024, description="Number of machines (multi-node runs use DeepSpeed/torchrun).")
    cuda: str | None = Field(None, description="Minimum CUDA version on the machine, e.g. '12.1'.")
    disk: Literal["nvme", "any"] = Field("any", description="'nvme': only offers with local NVMe for data.")
    spot: bool | Literal["auto"] = Field(False, description=(
        "true: spot/preemptible only; false: on-demand only; auto: whichever the planner scores best."))
    regions: list[Region] = Field(default_factory=list, description="Allowed regions, globs allowed: ['us-*'].")
    max_price: float | None = Field(None, gt=0, description="Price cap in USD per hour for the whole job (all nodes).")
    providers: list[ProviderName] = Field(default_factory=list, description=(
        "Allow-list of provider names; empty = any configured provider."))

    _gpu = field_validator("gpu", mode="before")(check_gpu)
    _spot = field_validator("spot", mode="before")(true_false_or_auto)
    _cuda = field_validator("cuda", mode="before")(number_as_text)

    @field_validator("cuda")
    @classmethod
    def _cuda_format(cls, value: str | None) -> str | None:
        if value is not None and not CUDA_VERSION.match(value):
            raise ValueError("must be a version like '12.1'")
        return value

    @property
    def gpu_spec(self) -> GpuSpec | None:
        """The parsed `gpu`, or None for a CPU-only job."""
        return parse_gpu_spec(self.gpu) if self.gpu else None


class Checkpoint(_Strict):
    """Where and how often training state is saved; `resume` continues from the latest complete one."""

    uri: str | None = Field(None, description=(
        "Store URI (file:// s3:// gs:// az://) or a local path (relative to the recipe's folder; becomes "
        "file://). Leave out for the provider's default."))
    every_steps: int = Field(100, ge=1, le=10**9, description="Save a checkpoint every this many optimizer steps.")
    per_epoch: int | None = Field(None, ge=1, le=10**6, description=(
        "Save this many checkpoints per epoch, evenly spaced, instead of every every_steps steps (Axolotl's "
        "saves_per_epoch)."))
    keep: int = Field(3, ge=1, le=1000, description="Keep this many most recent checkpoints in the store.")
    resume_from: str | None = Field(None, description=(
        "A Hugging Face Trainer checkpoint folder (checkpoint-N, with trainer_state.json; relative to the recipe's "
        "folder) that the job's first attempt starts from: weights or adapter, optimizer, scheduler and step "
        "(Axolotl's resume_from_checkpoint). Later resumes use the job's own checkpoints in the store."))

    _uri = field_validator("uri")(check_checkpoint_uri)
    _resume_from = field_validator("resume_from")(check_resume_from)

    @model_validator(mode="after")
    def _one_cadence(self) -> Checkpoint:
        if self.per_epoch is not None and "every_steps" in self.model_fields_set:
            raise ValueError("every_steps and per_epoch are both set: keep one (per_epoch spaces the saves by epoch)")
        return self


class Autostop(_Strict):
    """What the machine does to itself once idle, even with the client offline."""

    idle_minutes: float = Field(30, gt=0, le=10080, description=(
        "Idle time (no trainer, GPUs unused, nobody logged in) before acting; fractions allowed (0.5 = 30 s)."))
    action: Literal["stop", "terminate"] = Field("stop", description=(
        "stop: keep the disk (cheap, restartable); terminate: delete the machine."))


class Recipe(_Strict):
    """A fine-tuning job: model, data, hyper-parameters and what it may run on."""

    name: str = Field(pattern=NAME_PATTERN, description=(
        "Job name: 1-63 of a-z, 0-9 and '-', starting with a letter or digit (it ends up in machine names)."))
    base_model: str = Field(description=(
        "Hugging Face id ('org/name'), store URI (s3:// gs:// az:// file://), local model folder (relative to "
        "the recipe's folder; a local folder wins over a same-named Hub id) or " +
        ", ".join(f"'builtin:{b}'" for b in BUILTIN_MODELS) + " (a tiny random model for demos and tests)."))
    base_model_config: dict[str, int | float | bool | str] | str | None = Field(None, description=(
        "The model's sizes when launchpad cannot find them (a model that is neither in its bundled table nor "
        "downloadable): a path to its config.json, or its keys (hidden_size, intermediate_size, "
        "num_hidden_layers, num_attention_heads, num_key_value_heads, vocab_size)."))
    adapter: Literal["qlora", "lora", "full"] = Field("full", description=(
        "qlora: LoRA on a 4-bit base; lora: LoRA on a 16-bit base; full (the default, as in Axolotl): train "
        "every weight."))
    load_in_8bit: bool = Field(False, description=(
        "adapter: lora on an 8-bit base (bitsandbytes LLM.int8: half the weights' memory; Axolotl's key)."))
    datasets: list[Dataset] = Field(min_length=1, description="Training data; at least one entry.")
    sequence_len: int = Field(2048, ge=8, le=1 << 20, description="Maximum tokens per example; longer ones are cut.")
    micro_batch_size: int = Field(1, ge=1, le=65536, description="Examples per GPU per forward pass.")
    gradient_accumulation_steps: int = Field(1, ge=1, le=65536, description="Micro-batches per optimizer step.")
    learning_rate: float = Field(2e-4, gt=0, le=1, description="Peak learning rate.")
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup"] = Field(
        "cosine", description="Learning-rate schedule after warm-up.")
    warmup_steps: int = Field(0, ge=0, le=10**9, description="Optimizer steps of linear warm-up.")
    warmup_ratio: float | None = Field(None, ge=0, lt=1, description=(
        "Warm-up as a share of all steps (0.1 = the first 10%); warmup_steps wins when both are set."))
    weight_decay: float = Field(0.0, ge=0, le=1, description="AdamW weight decay.")
    adam_beta1: float = Field(0.9, gt=0, lt=1, description="AdamW beta1.")
    adam_beta2: float = Field(0.999, gt=0, lt=1, description="AdamW beta2.")
    adam_epsilon: float = Field(1e-8, gt=0, le=1, description="AdamW epsilon.")
    max_grad_norm: float = Field(1.0, ge=0, le=1e6, description="Gradient clipping norm (0 = no clipping).")
    num_epochs: float | None = Field(None, gt=0, le=10000, description=(
        "Passes over the data. Set this or max_steps; if both are set, max_steps wins (as in HF Trainer)."))
    max_steps: int | None = Field(None, ge=1, le=10**9, description=(
        "Optimizer steps to run. Set this or num_epochs; if both are set, max_steps wins (as in HF Trainer)."))
    bf16: bool | Literal["auto"] = Field("auto", description="bfloat16 training; auto = when the GPU supports it.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations to save memory (~30% slower).")
    gradient_checkpointing_kwargs: dict[Literal["use_reentrant"], bool] = Field(default_factory=dict, description=(
        "{use_reentrant: true|false}: PyTorch's checkpointing kind. Default false (non-reentrant), except LoRA "
        "under ZeRO-3, which needs true (Axolotl's key)."))
    fp32_master_weights: bool = Field(True, description=(
        "adapter: full without DeepSpeed: true keeps fp32 weights and trains under 16-bit autocast (16 bytes a "
        "parameter with AdamW); false trains the 16-bit weights directly (Axolotl's way: half the weights and "
        "grads, optimizer states in bf16; small updates can round away). DeepSpeed always keeps fp32 master "
        "weights in its optimizer."))
    tf32: bool = Field(False, description="TF32 matmuls on NVIDIA Ampere or newer (ignored elsewhere).")
    special_tokens: dict[Literal["pad_token", "eos_token", "bos_token", "unk_token"], str] = Field(
        default_factory=dict, description=(
            "Tokens set on the tokenizer, e.g. {pad_token: '<|end_of_text|>'} (Axolotl's key; a token new to the "
            "vocabulary grows the embeddings)."))
    lora_r: int = Field(8, ge=1, le=4096, description="LoRA rank.")
    lora_alpha: int = Field(16, ge=1, le=65536, description="LoRA scaling numerator (scale = lora_alpha / lora_r).")
    lora_dropout: float = Field(0.05, ge=0, lt=1, description="Dropout on the LoRA path.")
    lora_target_modules: Annotated[list[str], Field(min_length=1)] | str | None = Field(None, description=(
        "Module names to adapt, e.g. ['q_proj', 'v_proj'], or ['all-linear'] (every linear layer but the output "
        "head: Axolotl's lora_target_linear), or one regular expression that PEFT matches against each module's "
        "whole dotted name, e.g. 'model.layers.[0-9]+.self_attn.(q|v)_proj'; leave out for the model's "
        "attention projections."))
    lora_modules_to_save: list[str] | None = Field(None, description=(
        "Modules trained in full next to the adapter, e.g. ['embed_tokens', 'lm_head'] (Axolotl's name)."))
    flash_attention: bool | Literal["auto"] = Field("auto", description=(
        "FlashAttention-2. auto: when flash-attn is installed and the GPU can run it, else PyTorch SDPA; "
        "true: required (the job fails fast where it cannot run), from flash-attn or, where that is not "
        "installed, PyTorch's own varlen kernel (torch >= 2.10); false: always SDPA."))
    optimizer: Literal[OPTIMIZERS] | None = Field(None, description=(  # type: ignore[valid-type]
        "Optimizer (HF Trainer's `optim` names, as in Axolotl). Leave out for the adapter's default, the one "
        "the planner's memory estimate assumes: paged_adamw_8bit for qlora and full, adamw_8bit for lora."))
    deepspeed: str | None = Field(None, description=(
        "DeepSpeed JSON config: a path (relative to the recipe's folder) or a preset: zero2, zero3, "
        "zero3-offload. \"auto\" values are filled from the recipe."))
    sample_packing: bool = Field(False, description=(
        "Pack short samples into full sequence_len rows (TRL's best-fit packing; position ids restart at each "
        "sample, so no sample attends to another): far fewer padding tokens on short chat data (Axolotl's key)."))
    eval_sample_packing: bool | None = Field(None, description=(
        "Pack the evaluation rows too; default: as sample_packing (Axolotl's key)."))
    pad_to_sequence_len: bool = Field(False, description=(
        "Pad every batch to sequence_len: the same shapes at every step, so memory is steady from the first "
        "step (Axolotl's key)."))
    chat_template: str | None = Field(None, min_length=1, max_length=65536, description=(
        "The chat template applied to chat/alpaca data: tokenizer_default (the tokenizer's own, the default), "
        "one of " + ", ".join(NAMED_TEMPLATES) + " (Axolotl's names), or a Jinja template itself."))
    train_on_inputs: bool = Field(True, description=(
        "true: the loss covers every token; false: every assistant turn of each chat/alpaca row and its "
        "end-of-turn marker, the rest masked (Axolotl's default; per dataset: roles_to_train, train_on_eos)."))
    val_set_size: float = Field(0, ge=0, le=10**9, description=(
        "Rows held out for evaluation: a share below 1 (0.05 = 5%) or a number of rows (Axolotl's key); 0 = none."))
    eval_steps: int | None = Field(None, ge=1, le=10**9, description=(
        "Evaluate every this many optimizer steps (with val_set_size); evals_per_epoch otherwise."))
    evals_per_epoch: int | None = Field(None, ge=1, le=10**6, description=(
        "Evaluations per epoch when eval_steps is not set (default 4); the eval loss shows in status and the log."))
    seed: int = Field(42, ge=0, le=2**32 - 1, description="Random seed for data order and initialisation.")
    logging_steps: int = Field(1, ge=1, le=10**9, description="Log loss every this many optimizer steps.")
    wandb_project: str | None = Field(None, min_length=1, max_length=128, description=(
        "Report to Weights & Biases in this project (Axolotl's key; wandb must be installed where the job runs; "
        "give the key as env: WANDB_API_KEY: ${env:WANDB_API_KEY}). TensorBoard event files are always written "
        "to the store, next to the checkpoints."))
    wandb_entity: str | None = Field(None, min_length=1, max_length=128, description="The W&B team or user (Axolotl's key).")
    wandb_name: str | None = Field(None, min_length=1, max_length=128, description="The W&B run's name (Axolotl's key).")

    resources: Resources = Field(default_factory=Resources, description=Resources.__doc__)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint, description=Checkpoint.__doc__)
    autostop: Autostop = Field(default_factory=Autostop, description=Autostop.__doc__)
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, description=(
        "Environment variables for the trainer. Values may reference the launching shell's variables as "
        "${env:NAME}; they are resolved at launch and never stored or logged."))

    # Where the recipe came from (absolute), set by load_recipe; not a recipe key.
    _source_path: str | None = PrivateAttr(None)
    _source_shown: str | None = PrivateAttr(None)  # as the user typed it, for messages
    _notes: list[str] = PrivateAttr(default_factory=list)  # what loading translated or ignored (launchpad.axolotl)

    _name = field_validator("name", mode="before")(check_name)
    _base_model = field_validator("base_model")(check_base_model)
    _deepspeed = field_validator("deepspeed")(check_deepspeed)
    _bf16 = field_validator("bf16", "flash_attention", mode="before")(true_false_or_auto)

    @field_validator("chat_template")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is None or value == "tokenizer_default" or value in NAMED_TEMPLATES or is_jinja(value):
            return value
        raise ValueError(f"unknown template {value[:40]!r}: use tokenizer_default, one of "
                         f"{', '.join(NAMED_TEMPLATES)}, or a Jinja template ({{% for message in messages %}}...)")

    @field_validator("lora_target_modules")
    @classmethod
    def _targets(cls, value: list[str] | str | None) -> list[str] | str | None:
        if not isinstance(value, str):
            return value
        if value.strip() in ("all-linear", "all_linear"):
            return ["all-linear"]
        try:
            re.compile(value)
        except re.error as e:
            raise ValueError(f"{value!r} is not a regular expression ({e}): list the module names instead, "
                             "e.g. [q_proj, v_proj]") from None
        return value

    @model_validator(mode="after")
    def _steps_set(self) -> Recipe:
        if self.num_epochs is None and self.max_steps is None:
            raise ValueError(_STEPS_PROBLEM)
        if self.load_in_8bit and self.adapter != "lora":
            raise ValueError(f"load_in_8bit: an 8-bit base goes with adapter: lora (got adapter: {self.adapter}; "
                             "qlora is its 4-bit base, a full fine-tune trains 16-bit weights)")
        return self

    @model_validator(mode="after")
    def _resume_from_fits(self, info: ValidationInfo) -> Recipe:
        folder = self.checkpoint.resume_from
        if folder and validation_context(info)[1]:
            from .resume_from import inspect, problems

            found = problems(self, inspect(folder))
            if found:
                raise ValueError("; ".join(found))
        return self

    @property
    def notes(self) -> list[str]:
        """One line per Axolotl key translated, and a warning line for those ignored or not supported yet."""
        return list(self._notes)

    @property
    def source_path(self) -> str | None:
        """Absolute path of the file this recipe was loaded from; None if built in code."""
        return self._source_path


_STEPS_PROBLEM = "num_epochs, max_steps: neither is set (set max_steps: N or num_epochs: N; max_steps wins if both)"


def load_recipe(path: str | os.PathLike, overrides: dict[str, Any] | None = None) -> Recipe:
    """Read, validate and resolve a recipe file. Raises RecipeError with one line per problem, each
    starting with `path` as given. `overrides` maps dotted keys (``max_steps``, ``resources.gpu``,
    ``datasets[0].path``) to values applied before validation; relative paths in them resolve against
    the recipe's folder like the file's own."""
    shown = os.fspath(path)
    try:
        data = read_yaml_mapping(Path(shown).expanduser())
    except YamlError as e:
        raise RecipeError([f"{shown}: {p}" for p in e.problems]) from None
    data, problems, overridden = apply_overrides(data, overrides or {})
    if problems:
        raise RecipeError([f"{shown}: {p}" for p in problems])
    # The folder the user named, symlinks not followed: like docker compose, a linked recipe reads
    # its data next to the link.
    absolute = Path(os.path.abspath(Path(shown).expanduser()))
    base_dir = absolute.parent
    from .axolotl import translate

    data, notes, refused = translate(data, absolute, set(Recipe.model_fields))  # Axolotl's keys, as Axolotl means them
    try:
        recipe = Recipe.model_validate(data, context={"base_dir": base_dir, "check_paths": True})
    except ValidationError as e:
        lines = refused + format_errors(e, Recipe, overridden, present=set(data))
        if data.get("num_epochs") is None and data.get("max_steps") is None and _STEPS_PROBLEM not in lines:
            lines.append(_STEPS_PROBLEM)  # the model-level check only runs once every field is valid
        raise RecipeError([f"{shown}: {line}" for line in lines]) from None
    if refused:
        raise RecipeError([f"{shown}: {line}" for line in refused])
    if recipe.deepspeed:
        _check_deepspeed_config(recipe, shown)
    recipe._source_path = str(absolute)
    recipe._source_shown = shown
    recipe._notes = [f"{shown}: {line}" for line in notes]
    return recipe


def _check_deepspeed_config(recipe: Recipe, shown: str) -> None:
    """The DeepSpeed config, "auto" values filled from the recipe, through DeepSpeed's own validation
    (when installed): every bad field named, at validate time rather than on a rented GPU."""
    from .dsconfig import load_config, validate_config
    from .errors import BadInput

    if not recipe.deepspeed:
        return
    try:
        problems = validate_config(load_config(recipe.deepspeed), recipe)
    except BadInput as e:
        problems = [str(e)]
    if problems:
        raise RecipeError([f"{shown}: deepspeed: {p} (in {recipe.deepspeed})" for p in problems])


def resolve_env(recipe: Recipe, environ: Mapping[str, str], *, source: str | None = None) -> dict[str, str]:
    """The recipe's `env` with every ``${env:NAME}`` replaced from `environ`. A missing variable is a
    RecipeError naming the recipe file (or `source`), the env key and the variable; values never
    appear in messages."""
    shown = recipe._source_shown or recipe.source_path or source or "recipe"
    problems, resolved = [], {}
    for key, value in recipe.env.items():
        missing = [n for n in ENV_REF.findall(value) if n not in environ]
        for name in dict.fromkeys(missing):
            problems.append(f"{shown}: env.{key}: ${{env:{name}}} is not set in the environment (export {name} first)")
        if not missing:
            resolved[key] = ENV_REF.sub(lambda m: environ[m.group(1)], value)
    if problems:
        raise RecipeError(problems)
    return resolved


def recipe_hash(recipe: Recipe) -> str:
    """sha256 (hex) of the validated recipe as canonical JSON (resolved paths included)."""
    canonical = json.dumps(recipe.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def recipe_schema() -> dict:
    """JSON Schema of recipe files, for `launchpad schema` and editors."""
    schema = Recipe.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "launchpad recipe"
    return schema
