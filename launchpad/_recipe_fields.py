"""The recipe's field checks: pure functions and annotated types that launchpad.recipe's models use.

Each check raises ValueError with the fix in its message; pydantic wraps it and launchpad._recipe_errors
turns it into one ``<file>: <field>: <what> (<fix>)`` line. Checks that look at the file system do so only
when load_recipe asks (validation context ``check_paths``), never for the agent's job.json.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ValidationInfo

from .gpuspec import check_gpu_names, parse_gpu_spec

NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
BUILTIN_MODELS = ("tiny-llama",)  # `base_model: builtin:<name>`: made on the fly, no download
STORE_SCHEMES = ("file", "s3", "gs", "az")
DATASET_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv", ".txt")
_FILE_LIKE = re.compile(r"\.(jsonl|json|parquet|csv|txt|tsv|xlsx?|arrow|gz|zip|yaml|yml)$", re.IGNORECASE)
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", re.DOTALL)
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}(/|$)")
_HF_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}(/[A-Za-z0-9][A-Za-z0-9._-]{0,95})?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]{0,127})\}")
_REGION = re.compile(r"^[A-Za-z0-9*?][A-Za-z0-9*?_-]{0,63}$")
_PROVIDER = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
CUDA_VERSION = re.compile(r"^\d{1,2}(\.\d{1,2}){0,2}$")
_PATH_START = ("/", "./", "../", "~")
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw_8bit", "adamw_bnb_8bit", "paged_adamw_8bit",
              "paged_adamw_32bit", "adamw_torch_8bit", "adamw_torch_4bit", "adafactor", "sgd")


# ---- path and value checks (pure functions; the validators below call them) -------------------

def validation_context(info: ValidationInfo) -> tuple[Path | None, bool]:
    """(recipe folder, whether to check the file system) from load_recipe; (None, False) otherwise."""
    ctx = info.context or {}
    return ctx.get("base_dir"), bool(ctx.get("check_paths"))


def _local_path(value: str, base_dir: Path | None) -> str:
    p = Path(value).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = base_dir / p
    return os.path.abspath(p) if p.is_absolute() else value  # normalised; symlinks kept as the user named them


def _no_control_chars(value: str) -> str:
    value = value.strip()
    if not value:
        raise ValueError("must not be empty")
    if any(ord(c) < 32 for c in value):
        raise ValueError("must not contain control characters or line breaks")
    return value


def _store_uri(value: str, allowed: tuple[str, ...] = STORE_SCHEMES) -> tuple[str, str] | None:
    """(scheme, rest) for a URI, None for anything else. Raises ValueError for unsupported schemes."""
    m = _URI.match(value)
    if not m:
        return None
    scheme, rest = m.group(1).lower(), m.group(2)
    if scheme not in allowed:
        listed = ", ".join(f"{s}://" for s in allowed)
        raise ValueError(f"unsupported scheme '{scheme}://' (use {listed} or a local path)")
    if scheme != "file" and not _BUCKET.match(rest):
        raise ValueError(f"'{scheme}://' must be followed by a bucket name, e.g. {scheme}://my-bucket/path")
    if scheme == "file" and not rest:
        raise ValueError("'file://' must be followed by a path")
    return scheme, rest


def _existing(path: str, check: bool, *, what: str) -> str:
    if check and not os.path.exists(path):
        raise ValueError(f"{what} not found: {path} (relative paths are read from the recipe's folder)")
    return path


def _local_or_none(value: str, base_dir: Path | None, *, looks_local: Callable[[str], bool]) -> str | None:
    """The local path `value` names (file:// stripped, resolved against the recipe's folder), or None for
    an object-store URI or a Hugging Face id, which stay as written. A name that exists in the recipe's
    folder is local, as in from_pretrained."""
    uri = _store_uri(value)
    if uri:
        return _local_path(uri[1], base_dir) if uri[0] == "file" else None
    if (value.startswith(_PATH_START) or not _HF_ID.match(value) or looks_local(value)
            or (base_dir is not None and (base_dir / value).exists())):
        return _local_path(value, base_dir)
    return None


def check_base_model(value: str, info: ValidationInfo) -> str:
    value = _no_control_chars(value)
    base_dir, check = validation_context(info)
    if value.startswith("builtin:"):
        if value[len("builtin:"):] not in BUILTIN_MODELS:
            names = ", ".join(f"builtin:{b}" for b in BUILTIN_MODELS)
            raise ValueError(f"unknown builtin model (the builtins are: {names})")
        return value
    local = _local_or_none(value, base_dir, looks_local=lambda v: v.count("/") > 1)
    if local is None:
        return value  # an object-store URI or a Hugging Face model id
    path = _existing(local, check, what="model folder")
    if check and not os.path.isdir(path):
        raise ValueError(f"must be a model folder (with config.json), not a file: {path}")
    return path


def check_dataset_path(value: str, info: ValidationInfo) -> str:
    value = _no_control_chars(value)
    base_dir, check = validation_context(info)
    path = _local_or_none(value, base_dir, looks_local=lambda v: _FILE_LIKE.search(v) is not None)
    if path is None:
        return value  # an object-store URI or a Hugging Face dataset id
    if _FILE_LIKE.search(path) and not path.lower().endswith(DATASET_SUFFIXES):
        raise ValueError(f"unsupported file type (use {', '.join(DATASET_SUFFIXES)})")
    return _existing(path, check, what="dataset file")


def check_deepspeed(value: str | None, info: ValidationInfo) -> str | None:
    if value is None:  # explicit null, e.g. a dumped recipe
        return None
    value = _no_control_chars(value)
    base_dir, check = validation_context(info)
    from .dsconfig import PRESETS, looks_like_preset, preset_path

    if looks_like_preset(value) and not (base_dir is not None and (base_dir / value).exists()):
        if value not in PRESETS:
            raise ValueError(f"unknown DeepSpeed preset (presets: {', '.join(PRESETS)}; or a path to a JSON file)")
        found = preset_path(value)
        if found is None and check:
            raise ValueError("launchpad's configs/deepspeed folder is missing (set LAUNCHPAD_CONFIGS)")
        return str(found) if found else value
    if _store_uri(value, ("file",)):
        value = value[len("file://"):]
    path = _existing(_local_path(value, base_dir), check, what="DeepSpeed config")
    if check:
        if not os.path.isfile(path):
            raise ValueError(f"must be a DeepSpeed JSON file, not a folder: {path}")
        if os.path.getsize(path) > 1 << 20:
            raise ValueError(f"DeepSpeed config is larger than 1 MiB: {path}")
        try:
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            where = f" (line {e.lineno}: {e.msg})" if isinstance(e, json.JSONDecodeError) else ""
            raise ValueError(f"not valid JSON{where}: {path}") from None
        if not isinstance(config, dict):
            raise ValueError(f"must hold a JSON object {{...}}: {path}")
    return path


def check_checkpoint_uri(value: str | None, info: ValidationInfo) -> str | None:
    if value is None:  # explicit null, e.g. a dumped recipe
        return None
    value = _no_control_chars(value)
    base_dir, _ = validation_context(info)
    uri = _store_uri(value)
    if uri and uri[0] != "file":
        return value.rstrip("/")
    local = uri[1] if uri else value
    resolved = _local_path(local, base_dir)
    return Path(resolved).as_uri() if os.path.isabs(resolved) else value


def check_resume_from(value: str | None, info: ValidationInfo) -> str | None:
    if value is None:
        return None
    value = _no_control_chars(value)
    base_dir, check = validation_context(info)
    m = _URI.match(value)
    if m and m.group(1).lower() == "file":
        value = m.group(2)
    elif m:
        raise ValueError("must be a local checkpoint folder: to continue a launchpad job from its store, use "
                         "`launchpad resume JOB` (or `launchpad resume --from URI`)")
    path = _existing(_local_path(value, base_dir), check, what="checkpoint folder")
    if check:
        from .resume_from import inspect

        inspect(path)  # ValueError: not a Trainer checkpoint, with the fix
    return path


def check_name(value: Any) -> Any:
    if isinstance(value, str) and not re.match(NAME_PATTERN, value):
        bad = sorted({c for c in value if not (c.isascii() and (c.isdigit() or c.islower() or c == "-"))})
        why = f"has characters that are not allowed ({' '.join(map(repr, bad))})" if bad else "is not a valid name"
        if not bad and (not value or value.startswith("-")):
            why = "must start with a lowercase letter or digit"
        elif not bad and len(value) > 63:
            why = "is longer than 63 characters"
        slug = re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")[:63]
        hint = f"; e.g. {slug!r}" if slug else ""
        raise ValueError(f"{why}: use 1-63 of a-z, 0-9 and '-', starting with a letter or digit{hint}")
    return value


def true_false_or_auto(value: Any) -> Any:
    if isinstance(value, bool) or value == "auto":
        return value
    raise ValueError("must be true, false or auto")


def number_as_text(value: Any) -> Any:
    """YAML reads `cuda: 12.1` and `OMP_NUM_THREADS: 4` as numbers; they are meant as text."""
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def check_gpu(value: Any, info: ValidationInfo) -> Any:
    value = number_as_text(value)
    if not isinstance(value, str):
        return value
    spec = parse_gpu_spec(value)
    # Unknown names only where a user wrote the recipe (load_recipe): the agent re-validates job.json on a
    # machine whose catalog may differ, and a name accepted at `up` must not fail there.
    if validation_context(info)[1]:
        check_gpu_names(spec, value)
    return str(spec)  # canonical form


def _pattern(regex: re.Pattern, what: str) -> Any:
    def check(value: str) -> str:
        if not regex.match(value):
            raise ValueError(f"must be {what}")
        return value

    return AfterValidator(check)


def _check_env_value(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    rest = ENV_REF.sub("", value)
    if "${" in rest:
        raise ValueError("malformed reference (write ${env:NAME}, NAME of letters, digits and _)")
    return value


EnvName = Annotated[str, _pattern(_ENV_NAME, "a variable name of letters, digits and _ (not starting with a digit)")]
EnvValue = Annotated[str, BeforeValidator(number_as_text), AfterValidator(_check_env_value)]
Region = Annotated[str, _pattern(_REGION, "a region name or glob like 'us-east-1' or 'us-*'")]
ProviderName = Annotated[str, _pattern(_PROVIDER, "a provider name like 'local' or 'aws'")]
