"""DeepSpeed configs: the bundled presets, loading, and validation with DeepSpeed's own code.

`deepspeed:` in a recipe is a path to a JSON file or the name of a preset in ``configs/deepspeed/``
(`zero2`, `zero3`, `zero3-offload`). Presets use HF Trainer's ``"auto"`` values, which the trainer fills
from the recipe (micro batch, accumulation, learning rate, precision, clipping, bucket sizes from the
model's hidden size), so one file serves every recipe.

`validate_config` runs at `launchpad validate` time: it resolves the "auto" values from the recipe the
way HF Trainer would, then hands the result to `deepspeed.runtime.config.DeepSpeedConfig` (when
DeepSpeed is installed; it validates offline), section by section so that every bad field is named at
once, plus the checks DeepSpeed itself skips (a misspelt top-level key is silently ignored by it).
Importing this module is cheap; DeepSpeed (and torch) load only inside `validate_config`.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from .errors import BadInput

PRESETS = ("zero2", "zero3", "zero3-offload")
_PRESET_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")

# Top-level keys DeepSpeed reads (docs: deepspeed.ai/docs/config-json). Used only to catch typos: an
# unknown key close to one of these is an error, any other unknown key is left to DeepSpeed.
KNOWN_KEYS = (
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer",
    "scheduler", "fp16", "bf16", "bfloat16", "amp", "torch_autocast", "gradient_clipping", "zero_optimization",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "steps_per_print", "wall_clock_breakdown",
    "dump_state", "memory_breakdown", "activation_checkpointing", "flops_profiler", "comms_logger", "aio",
    "prescale_gradients", "gradient_predivide_factor", "communication_data_type", "data_types",
    "sparse_gradients", "tensorboard", "wandb", "csv_monitor", "comet", "checkpoint", "elasticity",
    "autotuning", "compile", "tensor_parallel", "pipeline", "data_efficiency", "curriculum_learning",
    "compression_training", "quantize_training", "hybrid_engine", "timers", "disable_allgather",
    "dataloader_drop_last", "nebula", "sequence_parallel_size", "seq_parallel_communication_data_type",
    "weight_quantization", "sparse_attention", "zero_quantized_weights", "graph_harvesting",
)
# pydantic model title -> the config section it validates (for naming fields in messages)
_SECTIONS = {
    "DeepSpeedZeroConfig": "zero_optimization", "DeepSpeedBF16Config": "bf16", "DeepSpeedFP16Config": "fp16",
    "CommsLoggerConfig": "comms_logger", "DeepSpeedFlopsProfilerConfig": "flops_profiler",
    "DeepSpeedActivationCheckpointingConfig": "activation_checkpointing", "DeepSpeedAIOConfig": "aio",
    "DeepSpeedMonitorConfig": "monitor", "DeepSpeedInferenceConfig": "inference", "CompileConfig": "compile",
    "DeepSpeedZeroOffloadOptimizerConfig": "zero_optimization.offload_optimizer",
    "DeepSpeedZeroOffloadParamConfig": "zero_optimization.offload_param",
}


def preset_path(name: str) -> Path | None:
    """configs/deepspeed/<name>.json when `name` is a preset and the configs folder is found."""
    if name not in PRESETS:
        return None
    from .config_dir import configs_dir
    from .errors import ConfigError

    try:
        path = configs_dir() / "deepspeed" / f"{name}.json"
    except ConfigError:
        return None
    return path if path.is_file() else None


def looks_like_preset(value: str) -> bool:
    """`zero3` (a name), as opposed to `ds.json` or `configs/zero3.json` (paths)."""
    return bool(_PRESET_NAME.match(value)) and not value.endswith(".json")


def load_config(ref: str | dict) -> dict[str, Any]:
    """The config dict for a recipe's `deepspeed` value: a dict as is, an existing JSON file, or a preset
    (by name, or a missing path whose file name is a preset's: the client's absolute path of a preset
    does not exist on the instance). Raises BadInput."""
    if isinstance(ref, dict):
        return copy.deepcopy(ref)
    path = Path(ref)
    if not path.is_file():
        stem = path.name.removesuffix(".json")
        found = preset_path(stem)
        if found is None:
            raise BadInput(f"DeepSpeed config {ref} is not on this machine (presets: {', '.join(PRESETS)})")
        path = found
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BadInput(f"DeepSpeed config {path}: not readable JSON: {e}") from None
    if not isinstance(config, dict):
        raise BadInput(f"DeepSpeed config {path}: must hold a JSON object")
    return config


def zero_stage(config: dict[str, Any] | None) -> int:
    try:
        return int((config or {}).get("zero_optimization", {}).get("stage", 0))
    except (TypeError, ValueError, AttributeError):
        return 0


def world_size_of(recipe) -> int:
    """GPUs in the whole job as the recipe asks for them (nodes x the smallest GPU count per node)."""
    spec = recipe.resources.gpu_spec
    per_node = spec.count_min if spec is not None else 1
    return max(1, recipe.resources.nodes) * max(1, per_node)


def resolve_auto(config: dict[str, Any], recipe, *, world_size: int | None = None, hidden_size: int = 4096,
                 total_steps: int = 1000) -> dict[str, Any]:
    """A copy of `config` with HF Trainer's "auto" values filled from the recipe, as HF Trainer fills them
    (transformers.integrations.deepspeed.HfTrainerDeepSpeedConfig). Only for validation: at run time
    HF Trainer resolves them itself from the real world size and model."""
    cfg = copy.deepcopy(config)
    n = world_size or world_size_of(recipe)
    mb, ga = recipe.micro_batch_size, recipe.gradient_accumulation_steps
    bf16 = recipe.bf16 is not False
    values = {
        ("train_micro_batch_size_per_gpu",): mb,
        ("gradient_accumulation_steps",): ga,
        ("train_batch_size",): mb * ga * n,
        ("gradient_clipping",): 1.0,
        ("bf16", "enabled"): bf16,
        ("fp16", "enabled"): False,
        ("optimizer", "params", "lr"): recipe.learning_rate,
        ("optimizer", "params", "betas"): [0.9, 0.999],
        ("optimizer", "params", "eps"): 1e-8,
        ("optimizer", "params", "weight_decay"): recipe.weight_decay,
        ("scheduler", "params", "warmup_min_lr"): 0.0,
        ("scheduler", "params", "warmup_max_lr"): recipe.learning_rate,
        ("scheduler", "params", "warmup_num_steps"): recipe.warmup_steps,
        ("scheduler", "params", "total_num_steps"): total_steps,
        ("zero_optimization", "reduce_bucket_size"): hidden_size * hidden_size,
        ("zero_optimization", "stage3_prefetch_bucket_size"): int(0.9 * hidden_size * hidden_size),
        ("zero_optimization", "stage3_param_persistence_threshold"): 10 * hidden_size,
    }
    for path, value in values.items():
        node: Any = cfg
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict) and node.get(path[-1]) == "auto":
            node[path[-1]] = value
    return cfg


def _autos_left(node: Any, where: str = "") -> list[str]:
    if node == "auto":
        return [where]
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _autos_left(v, f"{where}.{k}" if where else str(k))]
    return []


def _pydantic_lines(err: Any) -> tuple[list[str], str]:
    """(one line per error, the config section the failing model validates)."""
    title = getattr(err, "title", "") or ""
    section = _SECTIONS.get(title, title)
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e.get("loc", ()))
        field = ".".join(p for p in (section, loc) if p)
        got = e.get("input")
        shown = f" (got {got!r})" if "input" in e and not isinstance(got, (dict, list)) else ""
        lines.append(f"{field}: {e.get('msg', 'invalid')}{shown}")
    return lines, section


def validate_config(config: dict[str, Any], recipe, *, world_size: int | None = None) -> list[str]:
    """Problems with `config` for `recipe`, one line each as ``<field>: <what>``; [] when it validates.

    Without DeepSpeed installed only launchpad's own checks run (typos, types of the main sections)."""
    problems: list[str] = []
    for key in config:
        if key not in KNOWN_KEYS:
            close = difflib.get_close_matches(key, KNOWN_KEYS, n=1, cutoff=0.8)
            if close:
                problems.append(f"{key}: not a DeepSpeed setting (did you mean {close[0]}?)")
    shapeless = [key for key in ("zero_optimization", "optimizer", "scheduler", "fp16", "bf16")
                 if key in config and not isinstance(config[key], dict)]
    if shapeless:
        return problems + [f"{key}: must be an object {{...}}" for key in shapeless]
    n = world_size or world_size_of(recipe)
    mb, ga = recipe.micro_batch_size, recipe.gradient_accumulation_steps
    # HF Trainer refuses explicit values that disagree with the recipe: say so now, not on the GPU box.
    for key, want, what in (("train_micro_batch_size_per_gpu", mb, "micro_batch_size"),
                            ("gradient_accumulation_steps", ga, "gradient_accumulation_steps")):
        if config.get(key, "auto") not in ("auto", want):
            problems.append(f"{key}: {config[key]!r} disagrees with the recipe's {what} {want} (use \"auto\")")
    if config.get("train_batch_size", "auto") not in ("auto", mb * ga * n):
        problems.append(f"train_batch_size: {config['train_batch_size']!r} is not micro_batch_size x "
                        f"gradient_accumulation_steps x GPUs ({mb} x {ga} x {n} = {mb * ga * n}) (use \"auto\")")
    if config.get("fp16", {}).get("enabled") is True and recipe.bf16 is True:
        problems.append("fp16.enabled: true contradicts the recipe's bf16: true (use \"auto\")")
    cfg = resolve_auto(config, recipe, world_size=1)
    left = _autos_left(cfg)
    problems += [f"{p}: \"auto\" is not a value HF Trainer can fill here (set a value)" for p in left]
    if left or importlib.util.find_spec("deepspeed") is None:
        return problems
    # DeepSpeed checks the batch arithmetic against its own world size (1 here): ours is checked above.
    cfg.update(train_batch_size=mb * ga, train_micro_batch_size_per_gpu=mb, gradient_accumulation_steps=ga)
    return problems + _deepspeed_problems(cfg)


def _deepspeed_problems(cfg: dict[str, Any]) -> list[str]:
    """Run DeepSpeed's own parser; on a pydantic error drop the offending section and run again, so one
    call reports every bad section."""
    import contextlib
    import io

    from pydantic import ValidationError

    # DeepSpeed logs to stdout (its accelerator probe at import, notes while parsing): keep it out of
    # `validate --json` and the CLI's output. Its log handler keeps this sink; fine for a client process.
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink):
        from deepspeed.runtime.config import DeepSpeedConfig

    problems: list[str] = []
    cfg = copy.deepcopy(cfg)
    for _ in range(len(cfg) + 1):
        try:
            with contextlib.redirect_stdout(sink):
                DeepSpeedConfig(cfg)
            break
        except ValidationError as e:
            lines, section = _pydantic_lines(e)
            problems.extend(lines)
            top = section.split(".")[0]
            if top not in cfg:  # cannot narrow it down: stop rather than loop
                break
            del cfg[top]
        except (AssertionError, ValueError, TypeError, KeyError) as e:
            problems.append(f"DeepSpeed: {str(e).strip() or e.__class__.__name__}")
            break
    return problems
