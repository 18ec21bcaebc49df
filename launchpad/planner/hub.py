"""The Hugging Face Hub as the planner reads it: a model's small files (config.json, the tokenizer's), from
the HF cache, else one GET with a 5 s timeout and no retries (a plan offline must not hang on
huggingface_hub's backoff). `HF_TOKEN`, for gated repos, is read by huggingface_hub's headers; launchpad
never stores it."""

from __future__ import annotations

import os
from pathlib import Path


class HubUnreachable(Exception):
    """The GET did not get an answer (offline, DNS, a timeout): `str()` is the exception's class name."""


def is_repo_id(name: str) -> bool:
    return name.count("/") == 1 and "://" not in name and not name.startswith(("/", ".", "~"))


def available() -> bool:
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        return False
    return True


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def hf_cached(repo_id: str, name: str) -> Path | None:
    """The file in the Hugging Face cache (what a download by transformers left), or None."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, name)
    return Path(found) if isinstance(found, str) else None


def get(repo_id: str, name: str) -> tuple[int, str]:
    """(HTTP status, body) of the file on the Hub; HubUnreachable when there is no answer."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session

    try:
        resp = get_session().get(hf_hub_url(repo_id, name), headers=build_hf_headers(), timeout=5, follow_redirects=True)
    except Exception as exc:  # noqa: BLE001 - offline, DNS, timeouts: the caller says what it means
        raise HubUnreachable(exc.__class__.__name__) from None
    return resp.status_code, resp.text
