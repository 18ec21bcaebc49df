"""Vast.ai's REST API (https://console.vast.ai/api/v0) over plain HTTP, its errors mapped onto launchpad's tree.

Why not the `vastai` SDK (0.2.8): it is the CLI with a wrapper. `import vastai` builds the CLI's argument
parser, which downloads the GPU name list from console.vast.ai at import time (it fails offline and would
reach the real service from a test), calls `logging.basicConfig`, creates ~/.config/vastai and copies key
files around; each method takes an argparse Namespace and prints; and it sends the API key as a URL query
parameter. Its `VastAI(server_url=...)` would take another server, but nothing else about it is a library.
So: `requests` against the same documented endpoints, the key in an ``Authorization: Bearer`` header only.

Errors (the reference's shape is ``{"success": false, "error": "<code>", "msg": "<text>"}``; 429 bodies are
often plain text)::

    401, 403                              -> AuthError (the key is wrong, expired, or lacks a permission)
    no_such_ask / 404, 409, 410 on /asks/ -> NoCapacity(scope="offer"): someone else rented it first
    insufficient credit                   -> QuotaExceeded(scope="provider")
    429, 5xx, connection errors           -> TransientError, retried here with tenacity (bounded, jittered)
    anything else                         -> ProviderError naming the call and Vast's message
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launchpad.errors import AuthError, NoCapacity, ProviderError, QuotaExceeded, TransientError

log = logging.getLogger("launchpad.vast")

NAME = "vast"
DEFAULT_URL = "https://console.vast.ai"
ATTEMPTS = 5  # LAUNCHPAD_VAST_RETRIES overrides (>= 1)
KEY_HINT = "set VAST_API_KEY, or run `vastai set api-key KEY` (keys: https://cloud.vast.ai/manage-keys/)"
_GONE = object()


def key_files(config: Mapping[str, Any]) -> list[Path]:
    """Where the key may be stored: config's `api_key_file`, then the vastai CLI's own files (its
    ``$XDG_CONFIG_HOME/vastai/vast_api_key``, ~/.config by default, and the legacy ~/.vast_api_key)."""
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    files = [xdg / "vastai" / "vast_api_key", Path.home() / ".vast_api_key"]
    if config.get("api_key_file"):
        files.insert(0, Path(str(config["api_key_file"])).expanduser())
    return files


def api_key(config: Mapping[str, Any]) -> str | None:
    """VAST_API_KEY, else the first key file that has a key. Never logged, never stored by launchpad."""
    if os.environ.get("VAST_API_KEY", "").strip():
        return os.environ["VAST_API_KEY"].strip()
    for path in key_files(config):
        try:
            text = path.read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if text:
            return text
    return None


def retry_attempts() -> int:
    try:
        return max(1, int(os.environ.get("LAUNCHPAD_VAST_RETRIES", ATTEMPTS)))
    except ValueError:
        return ATTEMPTS


class VastAPI:
    """One account's API at `url` (the console's address; the API lives under /api/v0)."""

    def __init__(self, url: str, key: str, *, timeout: float = 30.0):
        try:
            import requests
        except ImportError:
            raise ProviderError("requests is not installed", provider=NAME, hint="pip install launchpad-vast") from None
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._session = requests.Session()
        self._session.headers.update({"Authorization": f"Bearer {key}", "Accept": "application/json",
                                      "User-Agent": "launchpad-vast"})

    def call(self, method: str, path: str, *, body: Any = None, retry: bool = True, gone: Any = _GONE) -> Any:
        """The JSON answer of ``METHOD /api/v0<path>``. `gone`: returned for a 404 instead of raising.
        `retry=False` for calls that must not run twice (renting an offer): the caller reconciles first."""
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

        what = f"{method} {path.split('?')[0]}"

        def before_sleep(state) -> None:
            log.warning("vast: %s failed (%s); retry %d/%d", what, state.outcome.exception(), state.attempt_number,
                        retry_attempts() - 1)

        for attempt in Retrying(stop=stop_after_attempt(retry_attempts() if retry else 1),
                                wait=wait_random_exponential(multiplier=0.5, max=8),
                                retry=retry_if_exception_type(TransientError), reraise=True, before_sleep=before_sleep):
            with attempt:
                return self._once(method, path, body, what, gone)
        raise AssertionError("unreachable")  # pragma: no cover

    def _once(self, method: str, path: str, body: Any, what: str, gone: Any) -> Any:
        import requests

        try:
            r = self._session.request(method, f"{self.url}/api/v0{path}", json=body, timeout=self.timeout)
        except (requests.ConnectionError, requests.Timeout) as e:
            raise TransientError(f"cannot reach Vast.ai at {self.url}: {type(e).__name__}", provider=NAME) from None
        if r.status_code == 404 and gone is not _GONE:
            return gone
        if r.status_code >= 400:
            raise translate(r.status_code, _body(r), what)
        if not r.content:
            return {}
        try:
            return r.json()
        except ValueError:
            raise TransientError(f"{what}: Vast.ai answered {r.status_code} with no JSON", provider=NAME) from None


def _body(r) -> Any:
    try:
        return r.json()
    except ValueError:
        return r.text


def message(body: Any) -> tuple[str, str]:
    """(error code, human text) of an error answer, whichever of its shapes it has."""
    if isinstance(body, Mapping):
        code = str(body.get("error") or "")
        text = str(body.get("msg") or body.get("message") or body.get("detail") or code or "")
        return code, " ".join(text.split())[:200]
    return "", " ".join(str(body or "").split())[:200]


def translate(status: int, body: Any, what: str) -> Exception:
    code, text = message(body)
    low = f"{code} {text}".lower()
    if status == 401:
        return AuthError(f"Vast.ai rejected the API key ({text or 'unauthorized'})", provider=NAME, hint=KEY_HINT)
    if "credit" in low or "balance" in low:
        return QuotaExceeded(f"{what}: {text} (add credit at https://cloud.vast.ai/billing/)", provider=NAME,
                             scope="provider")
    if status == 403:
        return AuthError(f"Vast.ai refused {what}: {text or 'forbidden'}", provider=NAME,
                         hint="a scoped key needs the instance read/write and machine read permissions")
    if "/asks/" in what and (code == "no_such_ask" or status in (404, 409, 410) or "not available" in low):
        return NoCapacity(f"the offer was rented by someone else first ({text or code or status})", provider=NAME,
                          scope="offer")
    if status == 429 or status >= 500:
        return TransientError(f"{what}: {status} {text}".rstrip(), provider=NAME)
    return ProviderError(f"{what}: {status} {code + ': ' if code and code not in text else ''}{text}".rstrip(),
                         provider=NAME)
