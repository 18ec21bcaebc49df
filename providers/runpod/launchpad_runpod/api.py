"""RunPod's GraphQL API (https://api.runpod.io/graphql) through the `runpod` SDK, errors mapped onto launchpad's tree.

The SDK's transport is used for every call (`runpod.api.graphql.run_graphql_query`: bearer auth, its
User-Agent, 401 -> AuthenticationError, a GraphQL ``errors`` entry -> QueryError), with its own query
strings where it has them (``myself { pods }``, ``pod``, ``podStop``, ``podResume``, ``podTerminate``).
What the SDK 1.12 does not write is written here from RunPod's GraphQL reference: the GPU types with their
prices, ``podRentInterruptable`` (spot) and ``podBidResume``, and a deploy mutation whose strings are escaped
(the SDK's own interpolates them raw). The API key is passed on each call, never set on the SDK's module.

Retries: only transient failures (connection errors, HTTP 5xx pages, RunPod's "Something went wrong"),
with tenacity, bounded and logged; a pod deploy is never retried here (the provider reconciles by name first).

    "There are no longer any instances available ..."   -> NoCapacity, scope offer (sold out)
    "not enough free GPUs on the host machine"           -> NoCapacity, scope offer (a stopped pod's host)
    balance / funds                                      -> QuotaExceeded, scope provider
    401, "Unauthorized"                                  -> AuthError
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launchpad.errors import AuthError, NoCapacity, NotConfigured, ProviderError, QuotaExceeded, TransientError

log = logging.getLogger("launchpad.runpod")

NAME = "runpod"
ATTEMPTS = 4  # LAUNCHPAD_RUNPOD_RETRIES overrides (>= 1)
KEY_ENV = "RUNPOD_API_KEY"
CREDENTIALS_FILE = "~/.runpod/config.toml"  # the SDK's and `runpod config`'s file: [default] api_key = "..."
_KEY_HINT = f"set {KEY_ENV}, or run `runpod config` (it writes {CREDENTIALS_FILE})"
_SOLD_OUT = ("no longer any instances available", "no instances available", "not enough free gpus",
             "no gpu available", "could not find any pods with required specifications")
_FUNDS = ("balance", "insufficient funds", "not enough funds", "add funds")
_TRANSIENT = ("something went wrong", "internal server error", "try again later", "too many requests",
              "rate limit", "timeout", "bad gateway", "service unavailable")
NOT_FOUND = ("pod not found", "not found to terminate", "no pod found")

# GPU types with their prices per GPU-hour: on-demand (securePrice / communityPrice) and the lowest
# interruptible bid (secureSpotPrice / communitySpotPrice); fields as in the SDK's generate_gpu_query.
GPU_TYPES = """
query GpuTypes {
  gpuTypes {
    id
    displayName
    memoryInGb
    secureCloud
    communityCloud
    securePrice
    communityPrice
    secureSpotPrice
    communitySpotPrice
    maxGpuCount
    maxGpuCountSecureCloud
    maxGpuCountCommunityCloud
  }
}
"""
MYSELF = "query myself { myself { id } }"
_DEPLOYED = "{ id imageName env machineId desiredStatus machine { podHostId } }"


def retry_attempts() -> int:
    try:
        return max(1, int(os.environ.get("LAUNCHPAD_RUNPOD_RETRIES", ATTEMPTS)))
    except ValueError:
        return ATTEMPTS


def api_key(config: Mapping[str, Any]) -> tuple[str | None, str]:
    """(key, where it came from): $RUNPOD_API_KEY, else the SDK's credentials file (config `credentials_file`
    overrides the path, `profile` the section, default "default"). (None, what was looked at) when neither has one."""
    if os.environ.get(KEY_ENV):
        return os.environ[KEY_ENV], KEY_ENV
    path = Path(str(config.get("credentials_file") or CREDENTIALS_FILE)).expanduser()
    profile = str(config.get("profile") or "default")
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # Python 3.10: the SDK depends on tomli
        import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
    try:
        with open(path, "rb") as fh:
            key = (tomllib.load(fh).get(profile) or {}).get("api_key")
    except FileNotFoundError:
        return None, f"{KEY_ENV} or {path}"
    except (OSError, ValueError) as e:
        raise NotConfigured(f"{path}: cannot read it ({e})", provider=NAME, hint=_KEY_HINT) from None
    return (str(key), str(path)) if key else (None, f"{KEY_ENV} or [{profile}] api_key in {path}")


def gql(value: Any) -> str:
    """A Python value as a GraphQL input literal; strings escaped (JSON's escapes are GraphQL's), an `Enum`
    bare, dicts as input objects, None as null."""
    if isinstance(value, Enum):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {gql(v)}" for k, v in value.items() if v is not None) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(gql(v) for v in value) + "]"
    raise TypeError(f"no GraphQL literal for {type(value).__name__}")


class Enum(str):
    """An enum value (``cloudType: SECURE``), written bare by `gql`."""


def deploy_mutation(fields: Mapping[str, Any], *, interruptible: bool) -> str:
    """``podFindAndDeployOnDemand`` or, with a ``bidPerGpu``, ``podRentInterruptable`` (RunPod's GraphQL
    reference, "Create Pods" / "Create Spot Pod"): same input, the pod's id and machine back."""
    op = "podRentInterruptable" if interruptible else "podFindAndDeployOnDemand"
    return f"mutation {{ {op}(input: {gql(fields)}) {_DEPLOYED} }}"


def bid_resume_mutation(pod_id: str, bid_per_gpu: float, gpu_count: int) -> str:
    """``podBidResume``: start a stopped interruptible pod again at this bid (the SDK resumes on-demand only)."""
    fields = {"podId": pod_id, "bidPerGpu": round(bid_per_gpu, 4), "gpuCount": gpu_count}
    return f"mutation {{ podBidResume(input: {gql(fields)}) {{ id desiredStatus }} }}"


def sdk():
    """The SDK modules used here (importing `runpod` costs ~2 s: only when an API call is made)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        from runpod import error
        from runpod.api import graphql
        from runpod.api.mutations import pods as mutations
        from runpod.api.queries import pods as queries
    except ImportError:
        raise NotConfigured("the runpod SDK is not installed", provider=NAME, hint="pip install launchpad-runpod") from None
    finally:
        # the SDK calls logging.basicConfig(level=INFO) on import (runpod.serverless.utils.rp_upload): every
        # library's INFO line (botocore's "Found credentials ...", ours) would reach the user's terminal
        root.handlers[:] = handlers
        root.setLevel(level)
    return graphql, queries, mutations, error


def use_endpoint(api_url: str | None) -> None:
    """Point the SDK at `api_url` (config `api_url`, e.g. a loopback double in tests). The SDK reads the
    GraphQL base URL only from $RUNPOD_API_BASE_URL, at each request (runpod/api/graphql.py), so this is
    the one place launchpad sets it; without `api_url` the SDK's default (or the user's variable) stands."""
    if api_url:
        os.environ["RUNPOD_API_BASE_URL"] = str(api_url).rstrip("/")


def classify(message: str, operation: str) -> ProviderError:
    """The launchpad error for a GraphQL error message of `operation`."""
    text = (message or "").strip()
    low = text.lower()
    short = text[:240]
    if any(s in low for s in _SOLD_OUT):
        return NoCapacity(f"{operation}: RunPod has none free now: {short}", provider=NAME, scope="offer")
    if any(s in low for s in _FUNDS):
        return QuotaExceeded(f"{operation}: {short} (add credit under Billing in the RunPod console)", provider=NAME,
                             scope="provider")
    if "unauthorized" in low or ("api key" in low and ("invalid" in low or "not valid" in low)):
        return AuthError(f"RunPod rejected the API key: {short}", provider=NAME, hint=_KEY_HINT)
    if any(s in low for s in _TRANSIENT):
        return TransientError(f"{operation}: {short}", provider=NAME)
    return ProviderError(f"{operation}: {short}", provider=NAME)


def is_not_found(e: BaseException) -> bool:
    return isinstance(e, ProviderError) and any(s in str(e).lower() for s in NOT_FOUND)


def call(key: str, query: str, operation: str, *, retry: bool = True) -> dict[str, Any]:
    """`query` through the SDK with `key`; its ``data``. Transient failures are retried (when `retry`)."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

    graphql, _, _, error = sdk()

    def once() -> dict[str, Any]:
        try:
            out = graphql.run_graphql_query(query, api_key=key)
        except error.AuthenticationError as e:
            raise AuthError(f"RunPod rejected the API key ({e})", provider=NAME, hint=_KEY_HINT) from None
        except error.QueryError as e:
            raise classify(str(e), operation) from None
        except Exception as e:  # requests: connection refused, timeout, a non-JSON 5xx page
            if type(e).__module__.startswith(("requests", "urllib3", "json")) or isinstance(e, (OSError, ValueError)):
                raise TransientError(f"{operation}: cannot reach RunPod ({type(e).__name__}: {str(e)[:160]})",
                                     provider=NAME) from None
            raise
        if not isinstance(out, dict) or not isinstance(out.get("data"), dict):
            raise TransientError(f"{operation}: RunPod answered without data", provider=NAME)
        return out["data"]

    def before_sleep(state) -> None:
        log.warning("runpod: %s failed (%s); retry %d/%d", operation, state.outcome.exception(),
                    state.attempt_number, retry_attempts() - 1)

    if not retry:
        return once()
    for attempt in Retrying(stop=stop_after_attempt(retry_attempts()), reraise=True, before_sleep=before_sleep,
                            wait=wait_random_exponential(multiplier=0.5, max=8),
                            retry=retry_if_exception_type(TransientError)):
        with attempt:
            return once()
    raise AssertionError("unreachable")  # pragma: no cover
