"""Turn pydantic's validation errors into launchpad's one-line recipe problems, and apply overrides.

Private helper of launchpad.recipe (kept apart so recipe.py stays a readable list of fields). A line
is ``<field>: <what> (got <value>; <fix>)``; recipe.py prefixes the file name. Values under `env` are
never echoed: they may be secrets.
"""

from __future__ import annotations

import copy
import difflib
import re
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

# Keys people bring from HF Trainer, TRL or other tools -> ours.
_ALIASES = {
    "lr": "learning_rate", "epochs": "num_epochs", "num_train_epochs": "num_epochs",
    "batch_size": "micro_batch_size", "per_device_train_batch_size": "micro_batch_size",
    "model": "base_model", "model_name": "base_model", "model_name_or_path": "base_model",
    "dataset": "datasets", "max_seq_length": "sequence_len", "max_length": "sequence_len",
    "seq_len": "sequence_len", "lora_rank": "lora_r", "target_modules": "lora_target_modules",
    "modules_to_save": "lora_modules_to_save", "output_dir": "checkpoint.uri", "save_steps": "checkpoint.every_steps",
    "save_total_limit": "checkpoint.keep", "gpus": "resources.gpu", "load_in_4bit": "adapter: qlora",
    "lr_scheduler_type": "lr_scheduler",
}
_TYPE_ALIASES = {"sharegpt": "chat", "chat_template": "chat", "messages": "chat", "text": "completion",
                 "pretrain": "completion", "completions": "completion", "instruct": "alpaca"}
_MISSING = {
    "name": "add e.g. name: my-run",
    "base_model": "add e.g. base_model: org/name or builtin:tiny-llama",
    "datasets": "add e.g. datasets: [{path: data.jsonl, type: chat}]",
    "path": "add e.g. path: data.jsonl",
}
_DATASET_SHAPE = "a mapping like {path: data.jsonl, type: chat}"


def dotted(loc: typing.Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]" if out else str(part)  # a list index, or a number used as a top-level key
            continue
        text = str(part)
        if not re.match(r"^[A-Za-z0-9_-]{1,64}$", text):
            text = repr(text[:64])
        out += f".{text}" if out else text
    return out


def _show(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return repr(value[:60] + "..." if len(value) > 60 else value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _model_at(root: type[BaseModel], parts: typing.Sequence[Any]) -> type[BaseModel] | None:
    """The model class that validates the mapping at `parts` (list indices skipped)."""
    cur: type[BaseModel] = root
    for part in parts:
        if isinstance(part, int):
            continue
        field = cur.model_fields.get(str(part))
        if field is None:
            return None
        found = None
        for t in (field.annotation, *typing.get_args(field.annotation)):
            for cand in (t, *typing.get_args(t)):
                if isinstance(cand, type) and issubclass(cand, BaseModel):
                    found = cand
        if found is None:
            return None
        cur = found
    return cur


def _unknown_key(root: type[BaseModel], loc: typing.Sequence[Any], present: typing.Collection[str] = ()) -> str:
    key = str(loc[-1])
    model = _model_at(root, loc[:-1])
    if model is None:
        return "unknown key"
    options = list(model.model_fields)
    guess = _ALIASES.get(key) if model is root else None
    if guess is not None and guess.split(".")[0].split(":")[0] in present:
        guess = None  # the file sets it already: the key means something else there
    if guess is None and model is root:  # a section's key written at the top level: `gpu:` for `resources.gpu:`
        for section in options:
            sub = _model_at(root, [section])
            if sub is not None and key in sub.model_fields:
                guess = f"{section}.{key}"
    if guess is None:
        close = difflib.get_close_matches(key, options, n=1, cutoff=0.6)
        # the closest key is one the file sets already: a different setting, not a typo of it (no next-best)
        guess = close[0] if close and (model is not root or close[0] not in present) else None
    if guess:
        return f"unknown key (did you mean '{guess}'?)"
    if len(options) <= 10:
        return f"unknown key (allowed: {', '.join(options)})"
    return "unknown key (see `launchpad schema` for the allowed keys)"


def _describe(err: Mapping[str, Any], loc: list, root: type[BaseModel], secret: bool,
              present: typing.Collection[str] = ()) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    fix = ""
    if kind == "extra_forbidden":
        return _unknown_key(root, loc, present)
    if kind == "missing":
        hint = _MISSING.get(str(loc[-1])) if loc else None
        return f"is required ({hint})" if hint else "is required"
    if kind == "value_error":
        what = str(ctx.get("error", err["msg"]))
        if secret or not loc or (isinstance(value, str) and value and value in what):
            return what
        return f"{what} (got {_show(value)})"
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        options = re.findall(r"'([^']*)'", expected)
        what = f"must be {expected}"
        if isinstance(value, str):
            guess = _TYPE_ALIASES.get(value.lower()) if loc and loc[-1] == "type" else None
            close = difflib.get_close_matches(value.lower(), options, n=1, cutoff=0.5)
            guess = guess or (close[0] if close else None)
            if guess:
                fix = f"; did you mean '{guess}'?"
    elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        words = {"greater_than": ("greater than", "gt"), "greater_than_equal": ("at least", "ge"),
                 "less_than": ("less than", "lt"), "less_than_equal": ("at most", "le")}[kind]
        bound = ctx.get(words[1])
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)  # "greater than 0", not "0.0"
        what = f"must be {words[0]} {bound}"
    elif kind in ("int_type", "int_parsing", "int_from_float"):
        what = "must be a whole number"
    elif kind in ("float_type", "float_parsing"):
        what = "must be a number"
    elif kind == "finite_number":
        what = "must be a finite number"
    elif kind in ("bool_type", "bool_parsing"):
        what = "must be true or false"
    elif kind == "string_type":
        what = "must be text"
        if isinstance(value, (int, float, bool)):
            fix = "; put it in quotes"
    elif kind == "list_type":
        what = f"must be a list of {_DATASET_SHAPE}" if loc == ["datasets"] else "must be a list"
    elif kind in ("dict_type", "model_type", "model_attributes_type"):
        what = f"must be {_DATASET_SHAPE}" if loc and loc[0] == "datasets" else "must be a mapping of keys"
    elif kind == "too_short":
        what = "must not be empty"
        if loc == ["datasets"]:
            return "must not be empty (add at least one entry like {path: data.jsonl, type: chat})"
    elif kind == "invalid_key":
        what = "keys must be text"
    elif kind == "string_pattern_mismatch":
        what = f"must match {ctx.get('pattern')}"
    else:
        msg = str(err["msg"])
        what = msg[:1].lower() + msg[1:]
    return what if secret else f"{what} (got {_show(value)}{fix})"


def format_errors(error: ValidationError, root: type[BaseModel], overridden: typing.Iterable[str] = (),
                  present: typing.Collection[str] = ()) -> list[str]:
    """One ``<field>: <what>`` line per distinct problem, in file order as pydantic reports them. `present`:
    the file's top-level keys (never suggested for another key: the file already sets them)."""
    lines: list[str] = []
    overridden = list(overridden)
    for err in _one_union_branch(error.errors(include_url=False)):
        loc = list(err["loc"])
        is_key = bool(loc) and loc[-1] == "[key]"
        if is_key:  # a bad key in a dict field (env): name the key, not the value
            loc = loc[:-1]
        secret = bool(loc) and loc[0] == "env"
        field = dotted(loc)
        from_override = any(field == o or field.startswith((o + ".", o + "[")) for o in overridden)
        what = _describe(err, loc, root, secret, () if from_override else present)  # an override replaces a key
        if is_key:
            what = what.replace("must be a", "is not a", 1)
        if from_override:
            field += " (from override)"
        line = f"{field}: {what}" if field else what
        if line not in lines:
            lines.append(line)
    return lines


_BRANCH = re.compile(r"^(str|int|float|bool|list\[.*\]|dict\[.*\])$")  # pydantic's name of a union member in a loc


def _one_union_branch(errors: list[Any]) -> list[Any]:
    """A value that fits no member of a union (`list[str] | str`) gets an error per member; keep the member
    of the value's own shape (the one with errors inside the value: [1, 2] is a list of wrong items, not a
    wrong string), or the first, and leave the member's name out of the location."""
    def branch_at(err) -> int | None:
        return next((i for i, part in enumerate(err["loc"]) if isinstance(part, str) and _BRANCH.match(part)), None)

    deep: dict[tuple, set[str]] = {}
    first: dict[tuple, str] = {}
    for err in errors:
        i = branch_at(err)
        if i is not None:
            key = tuple(err["loc"][:i])
            first.setdefault(key, err["loc"][i])
            if len(err["loc"]) > i + 1:
                deep.setdefault(key, set()).add(err["loc"][i])
    out = []
    for err in errors:
        i = branch_at(err)
        if i is None:
            out.append(err)
            continue
        key, member = tuple(err["loc"][:i]), err["loc"][i]
        if member in deep.get(key, {first[key]}):
            out.append({**err, "loc": (*err["loc"][:i], *err["loc"][i + 1:])})
    return out


def _split_key(key: str) -> list[str | int] | None:
    parts: list[str | int] = []
    for raw in re.sub(r"\[(\d+)\]", r".\1", key).split("."):
        if raw.isdigit():
            parts.append(int(raw))
        elif re.match(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$", raw):
            parts.append(raw)
        else:
            return None
    return parts if parts and isinstance(parts[0], str) else None


def apply_overrides(data: dict, overrides: dict[str, Any]) -> tuple[dict, list[str], list[str]]:
    """(new data, problems, dotted keys overridden). `data` is not modified."""
    if not overrides:
        return data, [], []
    data = copy.deepcopy(data)
    problems: list[str] = []
    done: list[str] = []
    for key, value in overrides.items():
        parts = _split_key(str(key))
        if parts is None:
            problems.append(f"override {str(key)[:64]!r}: not a key path (write e.g. max_steps or resources.gpu)")
            continue
        name = dotted(parts)
        if hasattr(value, "__fspath__"):
            value = str(value)
        cur: Any = data
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(part, int):
                if not isinstance(cur, list) or part > len(cur) or (part == len(cur) and not last):
                    problems.append(f"override {name}: {dotted(parts[:i + 1])} does not exist")
                    break
                if last:
                    cur[part:part + 1] = [value]
                else:
                    cur = cur[part]
            else:
                if not isinstance(cur, dict):
                    problems.append(f"override {name}: {dotted(parts[:i]) or 'the recipe'} is not a section")
                    break
                if last:
                    cur[part] = value
                else:
                    if cur.get(part) is None:
                        cur[part] = [] if isinstance(parts[i + 1], int) else {}
                    cur = cur[part]
        else:
            done.append(name)
    return data, problems, done
