"""What the base model's tokenizer files say, read before any machine boots: whether it has a chat template.

Chat and alpaca datasets are rendered with the tokenizer's chat template unless the recipe names one. A base
(not instruct) model usually has none (Meta-Llama-3-8B, Mistral-7B-v0.1), and the trainer found out on the
booted machine, after the weights were downloaded. `has_chat_template` answers from a local model folder,
the Hugging Face cache, or two small files on the Hub (launchpad.planner.hub), and None whenever it cannot
tell: the plan never blocks on a guess.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..errors import RecipeError
from . import hub

_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
_MISSING = object()
_CACHE_SECONDS = 86400


def has_chat_template(base_model: str, base_dir: Path | None = None) -> bool | None:
    """True/False when the model's tokenizer files say whether it has a chat template, else None."""
    if base_model.startswith("builtin:"):
        return True  # launchpad's tiny Llama ships one
    text = base_model[len("file://"):] if base_model.startswith("file://") else base_model
    local = Path(text).expanduser()
    if not local.is_absolute() and base_dir is not None:
        local = base_dir / local
    if local.is_dir():
        return _decide(lambda name: (local / name).read_text(encoding="utf-8") if (local / name).is_file() else None)
    if not hub.is_repo_id(base_model):
        return None
    return _decide(lambda name: _hub_text(base_model, name))


def _decide(read) -> bool | None:
    """From a reader of the model's files (text, None for absent, _MISSING for cannot tell)."""
    config = read("tokenizer_config.json")
    if config is None or config is _MISSING:
        return None  # no tokenizer here (it may live elsewhere) or unreadable: cannot tell
    try:
        if json.loads(config).get("chat_template"):
            return True
    except (ValueError, AttributeError):
        return None
    for name in _TEMPLATE_FILES:  # transformers >= 4.50 saves the template beside tokenizer_config.json
        found = read(name)
        if found is _MISSING:
            return None
        if found:
            return True
    return False


def _hub_text(repo_id: str, name: str):
    """The file's text from the HF cache or the Hub; None when the Hub says it does not exist (404), _MISSING
    when it cannot tell (offline and not cached, gated, any error)."""
    if not hub.available():
        return _MISSING
    if cached := hub.hf_cached(repo_id, name):
        return cached.read_text(encoding="utf-8")
    own = _own_cache(repo_id, name)
    if own.is_file() and time.time() - own.stat().st_mtime < _CACHE_SECONDS:  # an earlier plan's read: the file,
        # or an empty marker for "not in the repo"; a day old, it is read again (a repo may add a template)
        text = own.read_text(encoding="utf-8")
        return text if text else None
    if hub.offline():
        return _MISSING
    try:
        status, text = hub.get(repo_id, name)
    except hub.HubUnreachable:
        return _MISSING
    if status not in (200, 404):
        return _MISSING
    text = text if status == 200 else ""
    own.parent.mkdir(parents=True, exist_ok=True)
    tmp = own.with_name(own.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(own)  # whole or absent
    return text or None


def _own_cache(repo_id: str, name: str) -> Path:
    from ..settings import cache_dir

    return cache_dir() / "model-files" / repo_id.replace("/", "--") / name


def check_chat_template(recipe, where: str) -> None:
    """RecipeError when chat or alpaca data would meet a tokenizer without a chat template."""
    if getattr(recipe, "chat_template", None) not in (None, "tokenizer_default"):
        return
    chats = [i for i, ds in enumerate(recipe.datasets or []) if getattr(ds, "type", "chat") in ("chat", "alpaca")]
    if not chats:
        return
    src = getattr(recipe, "source_path", None)
    if has_chat_template(recipe.base_model, Path(src).parent if src else None) is False:
        raise RecipeError(f"{where}: chat_template: {recipe.base_model}'s tokenizer has no chat template (a base "
                          f"model?), and datasets[{chats[0]}] is {recipe.datasets[chats[0]].type} data, rendered with "
                          "one: set chat_template: chatml (or llama3, qwen_25, phi_3, gemma, or a Jinja template), "
                          "or use the instruct model")
