"""Recipe datasets -> one HF `datasets.Dataset` that TRL's SFTTrainer takes as is.

Types (Axolotl's names):
  chat        rows {"messages": [{"role", "content"}, ...]}; the tokenizer's chat template is applied
  alpaca      rows {"instruction", "input"?, "output"}; turned into a user/assistant conversation
  completion  rows {"text"}; plain language modelling

A path is a local .jsonl/.json file or folder of them (already absolute in the job spec), or a Hugging
Face dataset id loaded with `datasets.load_dataset` (its "train" split). Object-store URIs are pre-warmed
to local disk by the agent (issue 3) before the trainer starts. When every dataset is conversational the
result has a `messages` column (TRL applies the chat template); otherwise every row is rendered to a
`text` column. With train_on_inputs: false the rows are tokenized here, each turn masked the way Axolotl
masks it (launchpad.train.masking).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import BadInput

_LOCAL_SUFFIXES = (".jsonl", ".json")


def _read_json_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl file, or of a .json file holding a list (or JSON lines)."""
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if path.suffix == ".json" and stripped.startswith("["):
        try:
            rows = json.loads(text)
        except ValueError as e:
            raise BadInput(f"{path}: not valid JSON: {e}") from e
        if not all(isinstance(r, dict) for r in rows):
            raise BadInput(f"{path}: expected a list of objects")
        return rows
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as e:
            raise BadInput(f"{path}:{lineno}: not valid JSON ({e.__class__.__name__}: {e})") from e
        if not isinstance(row, dict):
            raise BadInput(f"{path}:{lineno}: expected a JSON object per line")
        rows.append(row)
    return rows


def load_rows(path: str, *, cache_dir: Path | None = None, split: str = "train", name: str | None = None,
              data_files: list[str] | None = None) -> Iterable[dict[str, Any]]:
    """Raw rows of one dataset path: local file/folder, or a Hugging Face id (its `split`, configuration
    `name` and `data_files`)."""
    local = Path(path[len("file://") :] if path.startswith("file://") else path)
    if local.is_file():
        return _read_json_rows(local)
    if local.is_dir() and (name or data_files):  # a dataset repository's copy: its configurations and files
        return _hf_load(str(local), name, split, data_files, cache_dir)
    if local.is_dir():
        files = sorted(p for p in local.rglob("*") if p.suffix in _LOCAL_SUFFIXES)
        if not files:
            raise BadInput(f"{local}: no .jsonl or .json files in this folder")
        return [row for f in files for row in _read_json_rows(f)]
    if local.is_absolute() or path.endswith(_LOCAL_SUFFIXES) or "://" in path:
        raise BadInput(f"dataset {path} does not exist on this machine")
    return _hf_load(path, name, split, data_files, cache_dir)


def _hf_load(path: str, name: str | None, split: str, data_files: list[str] | None, cache_dir: Path | None):
    import datasets

    try:
        return datasets.load_dataset(path, name, split=split, data_files=data_files,
                                     cache_dir=str(cache_dir) if cache_dir else None)
    except Exception as e:  # the hub client raises many types; the user needs one line
        raise BadInput(f"cannot load dataset {path!r}: {e.__class__.__name__}: {e}") from e


#: role names in the wild -> the chat template's (ShareGPT's human/gpt, Gemini's model); Axolotl's defaults
_ROLE_NAMES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "model": "assistant",
               "bot": "assistant", "system": "system", "tool": "tool"}


def _chat_row(row: dict[str, Any], where: str, spec: Any = None) -> list[dict[str, str]]:
    field = getattr(spec, "field_messages", None) or "messages"
    keys = {"role": "role", "content": "content", **(getattr(spec, "message_property_mappings", None) or {})}
    roles = dict(_ROLE_NAMES)
    for standard, names in (getattr(spec, "roles", None) or {}).items():
        roles.update({name: standard for name in names})
    messages = row.get(field)
    if not isinstance(messages, list) or not messages:
        raise BadInput(f"{where}: a chat row needs a non-empty {field!r} list")
    drop_system = bool(getattr(spec, "drop_system_message", False))
    out = []
    for m in messages:
        role, content = (m.get(keys["role"]), m.get(keys["content"])) if isinstance(m, dict) else (None, None)
        if not (isinstance(role, str) and isinstance(content, str)):
            raise BadInput(f"{where}: every message needs string {keys['role']!r} and {keys['content']!r}")
        if role not in roles:
            raise BadInput(f"{where}: unknown role {role[:40]!r} (map it with roles: {{user: [{role[:40]}]}})")
        if not (drop_system and roles[role] == "system"):
            out.append({"role": roles[role], "content": content})
    return out


def _alpaca_row(row: dict[str, Any], where: str) -> list[dict[str, str]]:
    instruction, output = row.get("instruction"), row.get("output")
    if not isinstance(instruction, str) or not isinstance(output, str):
        raise BadInput(f"{where}: an alpaca row needs string 'instruction' and 'output'")
    extra = row.get("input") or ""
    prompt = f"{instruction}\n\n{extra}" if extra else instruction
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": output}]


def _completion_row(row: dict[str, Any], where: str, field: str = "text") -> str:
    text = row.get(field)
    if not isinstance(text, str) or not text:
        raise BadInput(f"{where}: a completion row needs a non-empty string {field!r}")
    return text


def _prompt_completion(conversation: list[dict[str, str]], where: str) -> dict[str, list[dict[str, str]]]:
    """TRL's conversational prompt-completion row: the loss then covers the completion only."""
    last = max((i for i, m in enumerate(conversation) if m["role"] == "assistant"), default=None)
    if last is None:
        raise BadInput(f"{where}: no assistant message to train on (train_on_inputs: false masks everything else)")
    return {"prompt": conversation[:last], "completion": conversation[last:]}


def build_dataset(specs: list[Any], tokenizer, *, cache_dir: Path | None = None, train_on_inputs: bool = True,
                  log: Any = print):
    """One shuffled-by-the-trainer `datasets.Dataset` from the recipe's `datasets` list.

    `specs` are `launchpad.recipe.Dataset` objects (path, type). Raises BadInput naming the file and
    row for malformed data, and for an empty result.
    """
    from datasets import Dataset

    from .masking import TurnRule

    conversations: list[tuple[list[dict[str, str]], TurnRule]] = []
    texts: list[str] = []
    for spec in specs:
        rows = load_rows(spec.path, cache_dir=cache_dir, split=getattr(spec, "split", "train"),
                         name=getattr(spec, "name", None), data_files=getattr(spec, "data_files", None))
        rule = TurnRule.of(spec)
        for i, row in enumerate(rows):
            where = f"{spec.path}: row {i + 1}"
            if spec.type == "chat":
                conversations.append((_chat_row(row, where, spec), rule))
            elif spec.type == "alpaca":
                conversations.append((_alpaca_row(row, where), rule))
            else:
                texts.append(_completion_row(row, where, getattr(spec, "field", "text")))
    if not conversations and not texts:
        raise BadInput("the recipe's datasets hold no rows")
    if conversations and not getattr(tokenizer, "chat_template", None):
        raise BadInput("the tokenizer of this base model has no chat template, needed for chat/alpaca data: set "
                       "chat_template: chatml (or llama3, ..., or a Jinja template)")
    if conversations and not train_on_inputs:
        masked = _masked_turns(conversations, texts, tokenizer, log)
        if masked is not None:
            return masked
    chats = [c for c, _ in conversations]
    if not texts and not train_on_inputs:  # the prompt masked: TRL's completion-only loss
        rows = [_prompt_completion(c, f"conversation {i + 1}") for i, c in enumerate(chats)]
        log("train_on_inputs: false: the loss covers each row's final assistant reply (the prompt is masked)")
        return Dataset.from_dict({"prompt": [r["prompt"] for r in rows], "completion": [r["completion"] for r in rows]})
    if not train_on_inputs:
        log("train_on_inputs: false: completion data is trained on whole, so every row is (chat rows included)")
    if not texts:
        return Dataset.from_dict({"messages": chats})
    rendered = [tokenizer.apply_chat_template(c, tokenize=False) for c in chats]
    return Dataset.from_dict({"text": rendered + texts})


def _masked_turns(conversations, texts: list[str], tokenizer, log: Any):
    """Tokenized rows with Axolotl's per-turn loss mask (launchpad.train.masking), or None where it cannot
    be made (a slow tokenizer has no offsets; a template that renders a conversation's start differently):
    then the final reply alone is trained."""
    from datasets import Dataset

    from .masking import NotAPrefix, describe, tokenize_turns

    if not getattr(tokenizer, "is_fast", False):
        log("train_on_inputs: false: this tokenizer has no character offsets (not a fast tokenizer): the loss "
            "covers each row's final assistant reply")
        return None
    try:
        columns = tokenize_turns(tokenizer, conversations, texts)
    except NotAPrefix:
        log("train_on_inputs: false: this chat template renders a conversation's start unlike the whole, so turns "
            "cannot be told apart: the loss covers each row's final assistant reply")
        return None
    keep = [i for i, m in enumerate(columns["assistant_masks"]) if any(m)]
    if not keep:
        raise BadInput("no row has a turn to train on (train_on_inputs: false masks every other turn; check "
                       "roles_to_train and the data's roles)")
    if len(keep) < len(columns["input_ids"]):
        log(f"train_on_inputs: false: {len(columns['input_ids']) - len(keep)} rows have no turn to train on: left out")
        columns = {k: [v[i] for i in keep] for k, v in columns.items()}
    extra = " (completion rows whole)" if texts else ""
    log(f"train_on_inputs: false: the loss covers {describe(r for _, r in conversations)}{extra}")
    return Dataset.from_dict(columns)
