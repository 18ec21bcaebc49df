"""The training run: job spec -> base model + data + adapter -> TRL SFTTrainer -> checkpoints in the store.

Order of a run (each step says what it does in the log and in status.json):
  1. open the checkpoint store and prove it is writable (fail in seconds, not after the first save);
  2. resolve the base model (builtin tiny Llama, local folder, store URI or HF id) and the datasets;
  3. find the latest *complete* checkpoint in the store; if there is one, download it verified and
     resume from it: local checkpoint folders are never trusted (they may be half-written);
  4. train; every `checkpoint.every_steps`, on a SAVE_NOW request and at the last step, the HF
     checkpoint folder (tokenizer included) goes to the store via the uploader, then old ones are pruned.

Adapters: `lora` (PEFT) and `full` here; `qlora`, DeepSpeed and multi-node hang off `build_model` /
`training_args` in issue 4.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

from ..errors import BadInput, StorageError
from ..storage import open_store
from ..storage.checkpoints import download_checkpoint, latest_checkpoint
from .spec import JobSpec
from .status import MAX_LOSSES, StatusWriter

ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


def log(msg: str) -> None:
    print(msg, flush=True)


def check_store_writable(store, job_id: str) -> None:
    """Write and delete a probe object, so an unwritable store fails the job before training starts."""
    key = f"{job_id}/.launchpad-probe-{uuid.uuid4().hex[:8]}"
    try:
        store.put_bytes(key, b"")
        store.delete(key)
    except StorageError as e:
        raise StorageError(f"checkpoint store {store.uri()} is not writable: {e}") from e
    except OSError as e:
        raise StorageError(f"checkpoint store {store.uri()} is not writable: {e.strerror or e}") from e


def resolve_base_model(base_model: str, workdir: Path) -> str:
    """A from_pretrained() argument for the recipe's base_model: a local folder or an HF id."""
    from ..storage import scheme_of

    if base_model.startswith("builtin:"):
        from . import tiny

        if base_model != tiny.NAME:
            raise BadInput(f"unknown builtin model {base_model!r} (known: {tiny.NAME})")
        return str(tiny.ensure_tiny_llama(workdir))
    if base_model.startswith("file://") or Path(base_model).is_absolute() or base_model.startswith("."):
        from ..storage.file import path_of_file_uri

        path = path_of_file_uri(base_model) if base_model.startswith("file://") else Path(base_model)
        if not (path / "config.json").is_file():
            raise BadInput(f"base_model {base_model}: no config.json there (expected a Hugging Face model folder)")
        return str(path)
    if "://" in base_model:  # s3:// gs:// az://: copy the folder to local disk (issue 3 pre-warms it)
        store = open_store(base_model)
        dest = workdir / "cache" / "models" / f"{scheme_of(base_model)}-{uuid.uuid5(uuid.NAMESPACE_URL, base_model).hex[:12]}"
        if not (dest / "config.json").is_file():
            objects = store.list("")
            if not objects:
                raise BadInput(f"base_model {base_model}: nothing there")
            for obj in objects:
                store.get_file(obj.key, dest / obj.key)
        return str(dest)
    return base_model  # a Hugging Face id; from_pretrained uses the HF cache (or HF_HUB_OFFLINE)


def precision(recipe) -> dict[str, bool]:
    """bf16 where the recipe allows it and the GPU supports it; fp16 on older GPUs; fp32 on CPU."""
    import torch

    if recipe.bf16 is False or not torch.cuda.is_available():
        if recipe.bf16 is True:
            log("bf16 requested but there is no GPU here: training in fp32")
        return {"bf16": False, "fp16": False}
    if torch.cuda.is_bf16_supported():
        return {"bf16": True, "fp16": False}
    log("this GPU has no bf16: training in fp16 with loss scaling")
    return {"bf16": False, "fp16": True}


def build_model(recipe, model_path: str, prec: dict[str, bool]):
    """(model, tokenizer, peft_config or None) for the recipe's adapter."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if recipe.adapter == "qlora":
        raise BadInput("adapter: qlora lands with issue 4; use adapter: lora or full for now")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:  # many base models ship without one; eos is the usual stand-in
        tokenizer.pad_token = tokenizer.eos_token
    # LoRA: the frozen base may live in bf16; full fine-tune keeps fp32 master weights (autocast does bf16).
    dtype = torch.bfloat16 if prec["bf16"] and recipe.adapter == "lora" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    model.config.use_cache = False  # the KV cache is for generation; it wastes memory while training
    peft_config = None
    if recipe.adapter == "lora":
        from peft import LoraConfig

        targets = recipe.lora_target_modules
        if targets is None:
            names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
            targets = [p for p in ATTENTION_PROJECTIONS if p in names] or None  # None: PEFT's per-model default
        peft_config = LoraConfig(
            r=recipe.lora_r,
            lora_alpha=recipe.lora_alpha,
            lora_dropout=recipe.lora_dropout,
            target_modules=targets,
            modules_to_save=recipe.lora_modules_to_save,
            task_type="CAUSAL_LM",
        )
    return model, tokenizer, peft_config


def training_args(spec: JobSpec, prec: dict[str, bool]):
    import torch
    from trl import SFTConfig

    r = spec.recipe
    max_steps = spec.total_steps_override
    # Always explicit: TRL defaults it to True. transformers 5 renamed it (the old name warns).
    name = "activation_checkpointing" if "activation_checkpointing" in SFTConfig.__dataclass_fields__ else "gradient_checkpointing"
    ckpt: dict[str, Any] = {name: r.gradient_checkpointing}
    if r.gradient_checkpointing:
        ckpt[f"{name}_kwargs"] = {"use_reentrant": False}
    return SFTConfig(
        **ckpt,
        output_dir=str(spec.output_dir),
        per_device_train_batch_size=r.micro_batch_size,
        gradient_accumulation_steps=r.gradient_accumulation_steps,
        learning_rate=r.learning_rate,
        num_train_epochs=r.num_epochs or 1.0,
        max_steps=max_steps if max_steps is not None else -1,
        logging_steps=r.logging_steps,
        save_strategy="steps",
        save_steps=r.checkpoint.every_steps,
        save_total_limit=r.checkpoint.keep,  # local scratch only; the store is pruned separately
        seed=r.seed,
        data_seed=r.seed,
        deepspeed=r.deepspeed,
        max_length=r.sequence_len,
        packing=False,
        report_to="none",
        disable_tqdm=True,
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),
        **prec,
    )


def run(spec: JobSpec, status: StatusWriter) -> int:
    """Train the job to its last step and return that step. Raises LaunchpadError (or anything else)."""
    t0 = time.monotonic()
    recipe = spec.recipe
    # The store first, before seconds of imports: an unwritable store is the cheapest failure to find.
    spec.workdir.mkdir(parents=True, exist_ok=True)
    store = open_store(spec.checkpoint_uri)
    check_store_writable(store, spec.job_id)

    import datasets
    import transformers
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTTrainer

    from .callbacks import make_callbacks
    from .data import build_dataset
    from .upload import CheckpointUploader

    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()  # one bar per map() call would flood train.log
    # TRL/PEFT read a renamed transformers attribute: a warning per run that users cannot act on.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    transformers.set_seed(recipe.seed)

    log(f"job {spec.job_id}: base model {recipe.base_model}, adapter {recipe.adapter}")
    model_path = resolve_base_model(recipe.base_model, spec.workdir)
    prec = precision(recipe)
    model, tokenizer, peft_config = build_model(recipe, model_path, prec)
    dataset = build_dataset(list(recipe.datasets), tokenizer, cache_dir=spec.workdir / "cache" / "datasets")
    log(f"dataset: {len(dataset)} rows from {len(recipe.datasets)} source(s)")

    resume_dir = None
    ref = latest_checkpoint(store, spec.job_id)
    if ref is not None:
        resume_dir = download_checkpoint(store, ref, spec.workdir / "resume" / ref.name)
        log(f"resuming {spec.job_id} from {ref.name}")
        made_with = _manifest_recipe_hash(resume_dir)
        if made_with and made_with != spec.recipe_hash:
            log(f"warning: {ref.name} was saved by a different recipe (hash {made_with[:12]}, now {spec.recipe_hash[:12]})")
        status.update(
            resumed_from={"step": ref.step, "uri": ref.uri},
            last_checkpoint={"step": ref.step, "uri": ref.uri},
            step=ref.step,
            **prior_losses(resume_dir),
        )
    # Local checkpoint-N folders of an earlier attempt may be half-written: the store is the truth.
    shutil.rmtree(spec.output_dir, ignore_errors=True)

    uploader = CheckpointUploader(
        store,
        spec.job_id,
        keep=recipe.checkpoint.keep,
        recipe_hash=spec.recipe_hash,
        on_uploaded=lambda r: status.update(last_checkpoint={"step": r.step, "uri": r.uri}),
        log=log,
    )
    trainer = SFTTrainer(
        model=model,
        args=training_args(spec, prec),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=make_callbacks(status, uploader, spec.save_now_flag, log=log),
    )
    trainer.remove_callback(PrinterCallback)  # our ProgressCallback prints one line per logging step
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in trainer.model.parameters())
    log(f"training {trainable:,} of {total:,} parameters; ready in {time.monotonic() - t0:.1f}s")
    t1 = time.monotonic()
    trainer.train(resume_from_checkpoint=str(resume_dir) if resume_dir else None)
    uploader.close()
    steps = trainer.state.global_step - (ref.step if ref else 0)
    took = time.monotonic() - t1
    log(f"finished at step {trainer.state.global_step}: {steps} steps in {took:.1f}s ({steps / max(took, 1e-9):.1f} steps/s)")
    return trainer.state.global_step


def prior_losses(checkpoint_dir: Path) -> dict[str, Any]:
    """The loss history a checkpoint carries (trainer_state.json), so status.json keeps the whole curve
    across a resume on another machine."""
    try:
        state = json.loads((checkpoint_dir / "trainer_state.json").read_text())
        losses = [[int(e["step"]), float(e["loss"])] for e in state.get("log_history", []) if "loss" in e and "step" in e]
    except (OSError, ValueError, TypeError, KeyError):
        return {}
    return {"losses": losses[-MAX_LOSSES:], "loss": losses[-1][1]} if losses else {}


def _manifest_recipe_hash(checkpoint_dir: Path) -> str | None:
    from ..storage.checkpoints import MANIFEST

    try:
        return json.loads((checkpoint_dir / MANIFEST).read_text()).get("recipe_hash")
    except (OSError, ValueError, AttributeError):
        return None


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    return f"{exc.__class__.__name__}: {msg}" if not msg or not _is_ours(exc) else msg


def _is_ours(exc: BaseException) -> bool:
    from ..errors import LaunchpadError

    return isinstance(exc, LaunchpadError)


def print_error(msg: str, stream: Any = None) -> None:
    print(f"error: {msg}", file=stream or sys.stderr, flush=True)

