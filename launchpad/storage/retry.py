"""Bounded retries of store calls, and short error reasons, shared by every store and transfer.

A store maps its SDK's errors to StorageError (final: a missing object, refused credentials) or
StorageUnavailable (worth another try: timeouts, throttling, dropped connections); `retrying`
retries only the latter, a bounded number of times, so a dead store fails in seconds, not hours.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from ..errors import StorageUnavailable

RETRY_ATTEMPTS = 4  # per call or part; LAUNCHPAD_STORAGE_RETRIES overrides (>= 1)


def retry_attempts() -> int:
    try:
        return max(1, int(os.environ.get("LAUNCHPAD_STORAGE_RETRIES", RETRY_ATTEMPTS)))
    except ValueError:
        return RETRY_ATTEMPTS


def retrying(fn: Callable, *args, **kwargs):
    """Call `fn`, retrying on StorageUnavailable with bounded exponential back-off (tenacity):
    `retry_attempts()` tries in all, waits of 0.25 s, 0.5 s, 1 s ... capped at 4 s."""
    from tenacity import (
        Retrying,
        retry_if_exception_type,
        stop_after_attempt,
        wait_exponential,
    )

    for attempt in Retrying(
        stop=stop_after_attempt(retry_attempts()),
        wait=wait_exponential(multiplier=0.25, max=4),
        retry=retry_if_exception_type(StorageUnavailable),
        reraise=True,
    ):
        with attempt:
            return fn(*args, **kwargs)
    raise AssertionError("unreachable")  # pragma: no cover


def short_reason(e: BaseException, limit: int = 160) -> str:
    """The gist of a network error for a one-line message: "[Errno 111] Connection refused" rather
    than three nested urllib3 reprs."""
    text = " ".join(str(e).split())
    m = re.search(r"\[Errno -?\d+\][^'\")\]]*", text)
    if m:
        return m.group(0).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."
