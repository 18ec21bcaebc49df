"""The Lambda Cloud API (v1) over plain HTTP, and its errors mapped onto launchpad's tree.

The API key, in this order (the first found wins; launchpad never writes or logs it):
1. the environment variable ``LAMBDA_API_KEY``;
2. the file named by config ``api_key_file:``;
3. ``~/.lambda_cloud/lambda_keys``, the file Lambda's own guides and SkyPilot use.
A key file holds the bare key on one line, or a line ``api_key = <key>``. It is sent as a bearer token.

Every answer is ``{"data": ...}`` or ``{"error": {"code", "message", "suggestion"}}``; errors are read by
their `code` (Lambda: "avoid relying on message or suggestion"):

    global/invalid-api-key, 401                        -> AuthError (the key's source named)
    global/account-inactive, global/invalid-address,
    global/forbidden, 403                              -> AuthError (Lambda's suggestion quoted)
    instance-operations/launch/insufficient-capacity   -> NoCapacity, scope offer (capacity is per type and region)
    global/quota-exceeded                              -> QuotaExceeded, scope provider (an account quota, and
                                                          launches are rate-limited to one per 12 s)
    429, 5xx, a dropped connection, a timeout          -> TransientError, retried with tenacity (bounded)
    global/object-does-not-exist, global/not-found     -> `NotFound` (callers decide: "already gone" is fine)
    global/invalid-parameters and the rest             -> RequestRejected (exit 2) with Lambda's message
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launchpad.errors import AuthError, ConfigError, NoCapacity, ProviderError, QuotaExceeded, TransientError

log = logging.getLogger("launchpad.lambda")

NAME = "lambda"
DEFAULT_URL = "https://cloud.lambdalabs.com/api/v1"
KEY_ENV = "LAMBDA_API_KEY"
KEY_FILE = "~/.lambda_cloud/lambda_keys"
ATTEMPTS = 5  # LAUNCHPAD_LAMBDA_RETRIES overrides (>= 1)
KEY_HINT = ("create a key at https://cloud.lambdalabs.com/api-keys and export LAMBDA_API_KEY=<key> (or write "
            f"`api_key = <key>` to {KEY_FILE}, mode 0600)")
_TRANSIENT_STATUS = {429, 500, 502, 503, 504}
_AUTH_CODES = ("global/invalid-api-key", "global/account-inactive", "global/invalid-address", "global/forbidden")
_NOT_FOUND = ("global/object-does-not-exist", "global/not-found")


class NotFound(ProviderError):
    """The instance (or key, type) does not exist."""


class RequestRejected(ProviderError):
    """Lambda refused the request's parameters (an unknown region, key name or image): fix the settings."""

    exit_code = 2


@dataclass(frozen=True)
class ApiKey:
    value: str
    source: str  # for messages: "LAMBDA_API_KEY" or the file's path (never the key)

    def __repr__(self) -> str:  # never printed by accident
        return f"ApiKey(source={self.source!r})"


def retry_attempts() -> int:
    try:
        return max(1, int(os.environ.get("LAUNCHPAD_LAMBDA_RETRIES", ATTEMPTS)))
    except ValueError:
        return ATTEMPTS


def find_key(config: dict[str, Any]) -> ApiKey | None:
    """The API key from env, config `api_key_file`, or ~/.lambda_cloud/lambda_keys; None when there is none.
    ConfigError (one line) when `api_key_file` is named but cannot be read or holds no key."""
    if os.environ.get(KEY_ENV, "").strip():
        return ApiKey(os.environ[KEY_ENV].strip(), KEY_ENV)
    named = config.get("api_key_file")
    path = Path(str(named or KEY_FILE)).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if named:
            raise ConfigError(f"providers.lambda.api_key_file: {path}: no such file", hint=KEY_HINT) from None
        return None
    except OSError as e:
        raise ConfigError(f"providers.lambda.api_key_file: {path}: cannot read it ({e.strerror})", hint=KEY_HINT) from None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if sep and name.strip() == "api_key":
            line = value.strip().strip("'\"")
        if line and "=" not in line and " " not in line:
            return ApiKey(line, str(path))
    raise ConfigError(f"{'providers.lambda.api_key_file: ' if named else ''}{path}: holds no API key "
                      "(expected a line `api_key = <key>`)", hint=KEY_HINT)


def _requests() -> Any:
    try:
        return importlib.import_module("requests")  # (untyped without types-requests)
    except ImportError:
        raise ProviderError("requests is not installed", provider=NAME, hint="pip install launchpad-lambda") from None


def classify(status: int, error: dict[str, Any], operation: str, key: ApiKey | None) -> ProviderError:
    """The launchpad error for one of Lambda's error answers."""
    code = str(error.get("code") or "")
    message = " ".join(str(error.get("message") or f"HTTP {status}").split())[:300]
    suggestion = " ".join(str(error.get("suggestion") or "").split())[:200]
    said = f"{message}" + (f" ({suggestion})" if suggestion and suggestion not in message else "")
    if code == "global/invalid-api-key" or status == 401:
        source = f" from {key.source}" if key else ""
        return AuthError(f"Lambda Cloud rejected the API key{source}: {message}", provider=NAME, hint=KEY_HINT)
    if code in _AUTH_CODES or status == 403:
        return AuthError(f"Lambda Cloud refused {operation}: {said}", provider=NAME)
    if code == "instance-operations/launch/insufficient-capacity":
        return NoCapacity(f"Lambda Cloud has no capacity for it now: {message}", provider=NAME, scope="offer")
    if code == "global/quota-exceeded":
        return QuotaExceeded(f"Lambda Cloud quota exceeded: {said}", provider=NAME, scope="provider")
    if status in _TRANSIENT_STATUS:
        return TransientError(f"{operation}: {code or 'HTTP ' + str(status)}: {message}", provider=NAME)
    if code in _NOT_FOUND or status == 404:
        return NotFound(f"{operation}: {said}", provider=NAME)
    return RequestRejected(f"Lambda Cloud refused {operation}: {said}", provider=NAME)


class LambdaAPI:
    """One session to the API at `url` with `key`. Thread-safe (one requests.Session per thread)."""

    def __init__(self, url: str, key: ApiKey, *, timeout: float = 30.0):
        self.url, self.key, self.timeout = url.rstrip("/"), key, timeout
        self._local = threading.local()

    def _session(self) -> Any:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = _requests().Session()
            session.headers.update({"Authorization": f"Bearer {self.key.value}", "Accept": "application/json",
                                    "User-Agent": "launchpad-lambda"})
        return session

    def once(self, method: str, path: str, *, body: dict[str, Any] | None = None, operation: str = "",
             timeout: float | None = None) -> Any:
        """One request: its `data`, or the translated error (no retry)."""
        requests = _requests()
        operation = operation or f"{method} {path}"
        try:
            resp = self._session().request(method, self.url + path, json=body, timeout=timeout or self.timeout)
        except requests.RequestException as e:  # refused, reset, timed out, DNS: nothing was answered
            raise TransientError(f"cannot reach Lambda Cloud at {self.url} ({operation}): {type(e).__name__}",
                                 provider=NAME) from None
        try:
            doc = resp.json()
        except ValueError:
            doc = {}
        if resp.status_code >= 400 or (isinstance(doc, dict) and "error" in doc):
            error = doc.get("error") if isinstance(doc, dict) else None
            raise classify(resp.status_code, error if isinstance(error, dict) else {}, operation, self.key)
        if not isinstance(doc, dict) or "data" not in doc:
            raise TransientError(f"{operation}: an answer without `data` (HTTP {resp.status_code})", provider=NAME)
        return doc["data"]

    def call(self, method: str, path: str, *, body: dict[str, Any] | None = None, operation: str = "",
             not_found: Any = ...) -> Any:
        """`once`, retried on TransientError (bounded, jittered, logged); a NotFound returns `not_found`
        when one is given. Never use it for a request that must not run twice (the launch)."""
        for attempt in retrying(operation or f"{method} {path}"):
            with attempt:
                try:
                    return self.once(method, path, body=body, operation=operation)
                except NotFound:
                    if not_found is ...:
                        raise
                    return not_found
        raise AssertionError("unreachable")  # pragma: no cover


def retrying(operation: str) -> Any:
    """tenacity's Retrying for TransientError only: `retry_attempts()` tries, random exponential waits."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

    def before_sleep(state) -> None:
        log.warning("lambda: %s failed (%s); retry %d/%d", operation, state.outcome.exception(),
                    state.attempt_number, retry_attempts() - 1)

    return Retrying(stop=stop_after_attempt(retry_attempts()), wait=wait_random_exponential(multiplier=0.5, max=12),
                    retry=retry_if_exception_type(TransientError), reraise=True, before_sleep=before_sleep)
