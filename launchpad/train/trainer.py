"""The training run: job spec -> base model + data + adapter -> TRL SFTTrainer -> checkpoints in the store.

Order of a run (each step says what it does in the log and in status.json):
  1. open the checkpoint store and prove it is writable (fail in seconds, not after the first save);
  2. resolve the base model (builtin tiny Llama, local folder, store URI or HF id) and the datasets;
  3. find the latest *complete* checkpoint in the store; if there is one, download it verified and
     resume from it: local checkpoint folders are never trusted (they may be half-written);
  4. train; every `checkpoint.every_steps`, on a SAVE_NOW request and at the last step, the HF
     checkpoint folder (tokenizer included) goes to the store via the uploader, then old ones are pruned.

Adapters (model.py): `qlora` (4-bit NF4 base + LoRA), `lora`, `full`; DeepSpeed ZeRO-2/3 from the
recipe's config (dsconfig.py); several processes and nodes (distributed.py, started by launch.py).
Before any of it, envcheck.py records the machine in env.json and fails fast on a mismatch.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

from ..dsconfig import zero_stage
from ..errors import BadInput, StorageError
from ..storage import open_store
from .distributed import Ranks, node_lock
from .envcheck import check_environment, summary
from .model import (
    Precision,
    build_model,
    choose_optimizer,
    choose_precision,
    uses_gradient_checkpointing,
)
from .oom import OutOfMemory, is_oom, oom_advice
from .spec import TrainJob
from .status import MAX_LOSSES, StatusWriter

__all__ = ["build_model", "run", "training_args"]



def log(msg: str) -> None:
    """A line in train.log, from the node's local rank 0 only (the other ranks would repeat it)."""
    if os.environ.get("LOCAL_RANK", "0") in ("0", ""):
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
    from ..storage.local import local_path

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
            for obj in objects:  # keys come from the store: local_path refuses any that would leave `dest`
                store.get_file(obj.key, local_path(dest, obj.key, source=base_model))
        return str(dest)
    return base_model  # a Hugging Face id; from_pretrained uses the HF cache (or HF_HUB_OFFLINE)


def _quiet_library_noise(*, on_gpu: bool) -> None:
    """Keep train.log about the run: lines users cannot act on, repeated by every rank, are dropped
    (each fact they carry is logged once, in our words: the device, the attention, the optimizer)."""
    import logging

    if not on_gpu:  # DeepSpeed would probe for accelerators and warn that it fell back to CPU
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    logging.getLogger("bitsandbytes.backends.cpu.ops").setLevel(logging.ERROR)  # "pip install kernels"
    warnings.filterwarnings("ignore", message=r".*torch\.distributed\.\w+` is deprecated.*", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*Paged optimizers are not supported on CPU.*", category=UserWarning)
    warnings.filterwarnings("ignore", message=".*mtime may not be reliable.*")


def deepspeed_config(spec: TrainJob) -> dict[str, Any] | None:
    """The run's DeepSpeed config: the one carried in the spec, else the recipe's file or preset."""
    if spec.deepspeed_config is not None:
        return dict(spec.deepspeed_config)
    if not spec.recipe.deepspeed:
        return None
    from ..dsconfig import load_config

    return load_config(spec.recipe.deepspeed)


def split_for_eval(dataset: Any, recipe: Any, log: Any = print) -> tuple[Any, Any]:
    """(train, eval or None): `val_set_size` rows (a share below 1, else a count) held out, seeded."""
    size = float(getattr(recipe, "val_set_size", 0) or 0)
    if size <= 0:
        return dataset, None
    count = int(round(size * len(dataset))) if size < 1 else int(size)
    if not 1 <= count < len(dataset):
        from ..errors import BadInput

        raise BadInput(f"val_set_size {size:g}: {count} of the dataset's {len(dataset)} rows; it must leave at least "
                       "one row for each side (e.g. val_set_size: 0.05)")
    parts = dataset.train_test_split(test_size=count, seed=recipe.seed, shuffle=True)
    log(f"evaluation: {count} of {len(dataset)} rows held out")
    return parts["train"], parts["test"]


def _eval_args(r: Any) -> dict[str, Any]:
    """eval_steps as a count, or as a share of all steps (HF's rule for a float below 1) from evals_per_epoch."""
    steps: float = r.eval_steps or 1.0 / ((r.evals_per_epoch or 4) * (r.num_epochs or 1.0))
    return {"eval_strategy": "steps", "eval_steps": steps if r.eval_steps else min(steps, 0.999),
            "per_device_eval_batch_size": r.micro_batch_size}


def _save_steps(r: Any) -> float:
    """checkpoint.every_steps, or a share of all steps (HF's rule for a float below 1) from checkpoint.per_epoch."""
    per_epoch = getattr(r.checkpoint, "per_epoch", None)
    if not per_epoch:
        return r.checkpoint.every_steps
    return min(1.0 / (per_epoch * (r.num_epochs or 1.0)), 0.999)  # 1.0 would read as "every step"


def _padding_args(r: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if getattr(r, "pad_to_sequence_len", False):  # every batch padded to the full length: fixed shapes
        out["pad_to_multiple_of"] = r.sequence_len
    eval_packing = getattr(r, "eval_sample_packing", None)
    if eval_packing is not None:
        out["eval_packing"] = eval_packing
    return out


def training_args(spec: TrainJob, prec: Precision, *, ds_config: dict[str, Any] | None = None,
                  optim: str = "adamw_torch", report: list[str] | None = None, evaluate: bool = False):
    import torch
    from trl import SFTConfig

    r = spec.recipe
    max_steps = spec.total_steps_override
    # Always explicit: TRL defaults it to True. transformers 5 renamed it (the old name warns).
    fields = SFTConfig.__dataclass_fields__
    name = "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"
    checkpointing = uses_gradient_checkpointing(r)
    ckpt: dict[str, Any] = {name: checkpointing}
    if checkpointing:
        # Non-reentrant is the modern default; PEFT under ZeRO-3 needs the reentrant kind (HF forces it).
        reentrant = bool(ds_config) and zero_stage(ds_config) >= 3 and r.adapter != "full"
        chosen = (getattr(r, "gradient_checkpointing_kwargs", None) or {}).get("use_reentrant")
        if chosen is not None and chosen != reentrant:
            if reentrant:  # HF would switch it back, with a warning of its own; say why once
                log("gradient_checkpointing_kwargs: use_reentrant: true is kept: LoRA under ZeRO-3 needs it")
            else:
                reentrant = chosen
        ckpt[f"{name}_kwargs"] = {"use_reentrant": reentrant}
    on_cpu = not torch.cuda.is_available()
    return SFTConfig(
        **ckpt,
        output_dir=str(spec.output_dir),
        per_device_train_batch_size=r.micro_batch_size,
        gradient_accumulation_steps=r.gradient_accumulation_steps,
        learning_rate=r.learning_rate,
        lr_scheduler_type=r.lr_scheduler,
        warmup_steps=r.warmup_steps if r.warmup_steps or not getattr(r, "warmup_ratio", None) else float(r.warmup_ratio),
        tf32=True if getattr(r, "tf32", False) and torch.cuda.is_available() else None,
        weight_decay=r.weight_decay,
        adam_beta1=getattr(r, "adam_beta1", 0.9),
        adam_beta2=getattr(r, "adam_beta2", 0.999),
        adam_epsilon=getattr(r, "adam_epsilon", 1e-8),
        max_grad_norm=getattr(r, "max_grad_norm", 1.0),
        optim=optim,
        num_train_epochs=r.num_epochs or 1.0,
        max_steps=max_steps if max_steps is not None else -1,
        logging_steps=r.logging_steps,
        save_strategy="steps",
        save_steps=_save_steps(r),
        save_total_limit=r.checkpoint.keep,  # local scratch only; the store is pruned separately
        seed=r.seed,
        data_seed=r.seed,
        deepspeed=ds_config,
        max_length=r.sequence_len,
        packing=bool(getattr(r, "sample_packing", False)),
        **_padding_args(r),
        report_to=report or "none",  # launchpad.train.reporting: TensorBoard, W&B, MLflow
        **({"run_name": r.wandb_name} if getattr(r, "wandb_name", None) else {}),
        disable_tqdm=True,
        **(_eval_args(r) if evaluate else {}),
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0,
        use_cpu=on_cpu,
        ddp_backend="gloo" if on_cpu and Ranks.from_env().distributed else None,
        **prec.as_args(),
    )


def _resume_checkpoint(spec: TrainJob, store, ranks: Ranks, status: StatusWriter):
    """(ref, local folder) of the newest complete store checkpoint, or (None, None). One download per
    machine: the node's ranks take turns on a lock and reuse a verified folder."""
    from ..storage.checkpoints import download_for_resume

    with node_lock(spec.workdir / ".resume.lock"):
        # The newest checkpoint that verifies: a corrupt newest one is skipped with a warning, not retried for ever.
        ref, dest = download_for_resume(store, spec.job_id, spec.workdir / "resume", log=log)
        if ref is None or dest is None:
            return None, None
        if ranks.is_node_main:
            # Local checkpoint-N folders of an earlier attempt may be half-written: the store is the truth.
            shutil.rmtree(spec.output_dir, ignore_errors=True)
    log(f"resuming {spec.job_id} from {ref.name}")
    made_with = _manifest_recipe_hash(dest)
    if made_with and made_with != spec.recipe_hash:
        log(f"warning: {ref.name} was saved by a different recipe (hash {made_with[:12]}, now {spec.recipe_hash[:12]})")
    status.update(
        resumed_from={"step": ref.step, "uri": ref.uri},
        last_checkpoint={"step": ref.step, "uri": ref.uri},
        step=ref.step,
        **prior_losses(dest),
    )
    return ref, dest


def _start_from_folder(folder: Path, status: StatusWriter) -> int:
    """The step of checkpoint.resume_from (checked when the recipe loaded; copied here by the provider's sync)."""
    from ..resume_from import inspect

    try:
        start = inspect(str(folder))
    except ValueError as e:
        raise BadInput(f"checkpoint.resume_from: {e}") from None
    log(f"starting from {folder} (checkpoint.resume_from): step {start.step}, with its weights, optimizer and "
        "scheduler")
    status.update(resumed_from={"step": start.step, "uri": str(folder)}, step=start.step, **prior_losses(folder))
    return start.step


def run(spec: TrainJob, status: StatusWriter) -> int:
    """Train the job to its last step and return that step. Raises LaunchpadError (or anything else)."""
    t0 = time.monotonic()
    recipe = spec.recipe
    ranks = Ranks.from_env()
    # The store first, before seconds of imports: an unwritable store is the cheapest failure to find.
    spec.workdir.mkdir(parents=True, exist_ok=True)
    store = open_store(spec.checkpoint_uri)
    if ranks.is_node_main:
        check_store_writable(store, spec.job_id)
    ds_config = deepspeed_config(spec)
    env = check_environment(recipe, spec.env_path, deepspeed=ds_config is not None, write=ranks.is_node_main)
    _quiet_library_noise(on_gpu=bool(env["cuda_available"]))
    log(summary(env))

    import datasets
    import transformers
    from transformers.trainer_callback import PrinterCallback
    from trl import SFTTrainer

    from .callbacks import make_callbacks
    from .data import build_dataset
    from .distributed import NoUpload, make_distributed_callbacks
    from .upload import CheckpointUploader

    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()  # one bar per map() call would flood train.log
    # TRL/PEFT read a renamed transformers attribute: a warning per run that users cannot act on.
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    warnings.filterwarnings("ignore", message=".*gradient_checkpointing_enable.*", category=FutureWarning)
    transformers.set_seed(recipe.seed)

    where = f" on {ranks.world_size} processes ({ranks.local_world_size} per node)" if ranks.distributed else ""
    ds_note = f", DeepSpeed ZeRO-{zero_stage(ds_config)}" if ds_config is not None else ""
    log(f"job {spec.job_id}: base model {recipe.base_model}, adapter {recipe.adapter}{ds_note}{where}")
    model_path = resolve_base_model(recipe.base_model, spec.workdir)
    prec = choose_precision(recipe, log=log)
    optim = choose_optimizer(recipe, log=log)
    model, tokenizer, peft_config = build_model(recipe, model_path, prec, log=log, zero_stage=zero_stage(ds_config))
    dataset = build_dataset(list(recipe.datasets), tokenizer, cache_dir=spec.workdir / "cache" / "datasets",
                            train_on_inputs=getattr(recipe, "train_on_inputs", True), log=log)
    dataset, eval_dataset = split_for_eval(dataset, recipe, log=log)
    log(f"dataset: {len(dataset)} rows from {len(recipe.datasets)} source(s)")

    ref, resume_dir = _resume_checkpoint(spec, store, ranks, status)
    if ref is None and ranks.is_node_main:
        shutil.rmtree(spec.output_dir, ignore_errors=True)
    start_step = ref.step if ref else 0
    if ref is None and recipe.checkpoint.resume_from:  # the first attempt: the folder the recipe names
        resume_dir = Path(recipe.checkpoint.resume_from)
        start_step = _start_from_folder(resume_dir, status)
    from .packing import keep_rows, packing_leaks
    from .reporting import RunsMirror, guard_integrations, integration_env, mirror_callback, report_to, throttle_tensorboard_flush

    os.environ.update(integration_env(recipe, spec.workdir))  # read by the integrations when they start
    report = report_to(recipe, log=log if ranks.is_main else lambda _m: None)
    args = training_args(spec, prec, ds_config=ds_config, optim=optim, report=report, evaluate=eval_dataset is not None)
    if args.packing and (leaky := packing_leaks(model)):
        args.packing = False  # padded rows instead: slower, but each sample sees only itself
        if getattr(args, "eval_packing", None):
            args.eval_packing = False
        log(f"sample packing: off, {leaky} does not keep packed samples apart in transformers (each would attend "
            "to the ones before it in its row): training on padded rows")
    if ref is not None and resume_dir is not None and reached_last_step(resume_dir, ref.step, args.max_steps):
        # Finished work stays finished: no step past the last, no new checkpoint, nothing pruned.
        log(f"{ref.name} is the last step of {spec.job_id}: nothing left to train")
        return ref.step

    if ranks.is_main:
        uploader: Any = CheckpointUploader(
            store,
            spec.job_id,
            keep=recipe.checkpoint.keep,
            recipe_hash=spec.recipe_hash,
            on_uploaded=lambda r: status.update(last_checkpoint={"step": r.step, "uri": r.uri}),
            log=log,
        )
    else:
        uploader = NoUpload()
    # SAVE_NOW is per machine (its agent writes it): the node's local rank 0 watches it, the decision
    # is shared by SyncSaveCallback. Other ranks watch a file that never appears.
    save_now = spec.save_now_flag if ranks.is_node_main else spec.workdir / f".no-save-now-{ranks.rank}"
    before, after = make_distributed_callbacks(ranks, store, spec.job_id, log=log)
    mirror = RunsMirror(store, spec.job_id, spec.workdir / "runs", log=log) if ranks.is_main and "tensorboard" in report else None
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,  # saved into every checkpoint folder next to the weights
        peft_config=peft_config,
        callbacks=[*before, *make_callbacks(status, uploader, save_now, log=log), *after],
    )
    trainer.remove_callback(PrinterCallback)  # our ProgressCallback prints one line per logging step
    guard_integrations(trainer, report, log=log)  # a failing metrics backend never ends the run
    flush_tensorboard = throttle_tensorboard_flush(trainer)
    if mirror is not None:  # last, as before: the checkpoint is saved, the event file flushed, then copied
        trainer.add_callback(mirror_callback(mirror, flush=flush_tensorboard))
    if args.packing and trainer.train_dataset is not None:
        log(f"sample packing: {len(dataset)} rows in {len(trainer.train_dataset)} sequences of up to "  # type: ignore[arg-type]
            f"{recipe.sequence_len} tokens (position ids restart at each row)")
        keep_rows(trainer, getattr(getattr(trainer.model, "config", None), "_attn_implementation", None), log)
    assert trainer.model is not None  # SFTTrainer was given one
    params = list(trainer.model.parameters())
    trainable = sum(int(p.numel()) for p in params if p.requires_grad)
    total = sum(int(p.numel()) for p in params)
    optim_name = args.optim.value if hasattr(args.optim, "value") else args.optim
    log(f"training {trainable:,} of {total:,} parameters ({prec.dtype}, optimizer {optim_name}); "
        f"ready in {time.monotonic() - t0:.1f}s")
    t1 = time.monotonic()
    try:
        trainer.train(resume_from_checkpoint=str(resume_dir) if resume_dir else None)
    except BaseException as e:
        if is_oom(e):
            import torch

            raise OutOfMemory(oom_advice(recipe, on_gpu=torch.cuda.is_available())) from e
        raise
    uploader.close()
    if mirror is not None:
        mirror.sync()  # the last events (the integration closed its writer at the end of training)
    steps = trainer.state.global_step - start_step
    took = time.monotonic() - t1
    log(f"finished at step {trainer.state.global_step}: {steps} steps in {took:.2f}s ({steps / max(took, 1e-9):.1f} steps/s)")
    _log_peak_memory()
    return trainer.state.global_step


def reached_last_step(checkpoint_dir: Path, step: int, max_steps: int) -> bool:
    """Is `step` the job's last? `max_steps` from the training arguments (> 0 when the job counts
    steps), else the total the checkpoint's own run computed from its epochs (trainer_state.json)."""
    if max_steps and max_steps > 0:
        return step >= max_steps
    try:
        planned = int(json.loads((checkpoint_dir / "trainer_state.json").read_text()).get("max_steps") or 0)
    except (OSError, ValueError):
        return False
    return planned > 0 and step >= planned


def _log_peak_memory() -> None:
    """Peak GPU memory of this rank (what the planner's per-GPU estimate is compared with)."""
    import torch

    if torch.cuda.is_available():
        gib = 2**30
        log(f"peak GPU memory: {torch.cuda.max_memory_allocated() / gib:.2f} GiB allocated, "
            f"{torch.cuda.max_memory_reserved() / gib:.2f} GiB reserved")


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

