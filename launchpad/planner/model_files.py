"""What the base model's tokenizer files say, read before any machine boots: whether it has a chat template.

Chat and alpaca datasets are rendered with the tokenizer's chat template unless the recipe names one. A base
(not instruct) model usually has none (Meta-Llama-3-8B, Mistral-7B-v0.1), and the trainer found out on the
booted machine, after the weights were downloaded. `has_chat_template` answers from a local model folder,
the Hugging Face cache, or two small files on the Hub (one GET each, 5 s, no retries; `HF_TOKEN` for gated
repos), and None whenever it cannot tell: the plan never blocks on a guess.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..errors import RecipeError

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
    if base_model.count("/") != 1 or "://" in base_model or base_model.startswith(("/", ".", "~")):
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
    try:
        from huggingface_hub import hf_hub_url, try_to_load_from_cache
        from huggingface_hub.utils import build_hf_headers, get_session
    except ImportError:
        return _MISSING
    cached = try_to_load_from_cache(repo_id, name)
    if isinstance(cached, str):
        return Path(cached).read_text(encoding="utf-8")
    own = _own_cache(repo_id, name)
    if own.is_file() and time.time() - own.stat().st_mtime < _CACHE_SECONDS:  # an earlier plan's read: the file,
        # or an empty marker for "not in the repo"; a day old, it is read again (a repo may add a template)
        text = own.read_text(encoding="utf-8")
        return text if text else None
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return _MISSING
    try:
        resp = get_session().get(hf_hub_url(repo_id, name), headers=build_hf_headers(), timeout=5, follow_redirects=True)
    except Exception:  # noqa: BLE001 - offline, DNS, timeouts: cannot tell
        return _MISSING
    if resp.status_code not in (200, 404):
        return _MISSING
    text = resp.text if resp.status_code == 200 else ""
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
