"""Azure SDK clients for launchpad, and ARM's errors mapped onto launchpad's exception tree.

Credentials: `DefaultAzureCredential` (environment, workload identity, managed identity, `az login`, ...);
launchpad never reads, logs or stores a secret itself. Requests go to the ARM endpoint in config
(`endpoint`, default https://management.azure.com); a plain-http endpoint is accepted only on loopback
(a test double), where the bearer-token policy is told so, since it refuses tokens over http otherwise.

Retries: the SDK's own retry policy is switched off (one attempt per request) and `call` retries only the
transient errors (429, 5xx, dropped connections) with tenacity: bounded, jittered, logged. Everything
else becomes a `LaunchpadError` a user can act on:

    SkuNotAvailable, AllocationFailed, Overconstrained..., spot max price -> NoCapacity (offer)
    ZonalAllocationFailed, OverconstrainedZonalAllocationRequest        -> NoCapacity (zone)
    QuotaExceeded, OperationNotAllowed about a cores quota              -> QuotaExceeded (region)
    AuthorizationFailed (403), 401, no credential                       -> AuthError naming the action
    anything else                                                        -> ProviderError
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from launchpad.errors import AuthError, NoCapacity, ProviderError, QuotaExceeded, TransientError

log = logging.getLogger("launchpad.azure")

NAME = "azure"
ARM = "https://management.azure.com"
SCOPE = "https://management.azure.com/.default"
ATTEMPTS = 5  # LAUNCHPAD_AZURE_RETRIES overrides (>= 1)
CRED_HINT = ("run `az login`, or set AZURE_CLIENT_ID, AZURE_TENANT_ID and AZURE_CLIENT_SECRET, or run where a "
             "managed identity is assigned")
_QUOTA = ("the subscription's vCPU quota for this VM family in this region is used up (request more: Azure portal > "
          "Quotas > Compute)")
# error code -> (exception class, scope, what it means for the user)
_CAPACITY: dict[str, tuple[type[NoCapacity], str, str]] = {
    "SkuNotAvailable": (NoCapacity, "offer", "this VM size is not available to the subscription in this region now"),
    "AllocationFailed": (NoCapacity, "offer", "Azure has no capacity for this VM size in this region now"),
    "ZonalAllocationFailed": (NoCapacity, "zone", "Azure has no capacity for this VM size in this zone now"),
    "OverconstrainedAllocationRequest": (NoCapacity, "offer", "no Azure cluster can host this VM size with the requested "
                                         "constraints (spot, accelerated networking, ...) now"),
    "OverconstrainedZonalAllocationRequest": (NoCapacity, "zone", "no cluster in this zone can host this VM size with "
                                              "the requested constraints now"),
    "SpotMaxPriceTooLow": (NoCapacity, "offer", "the spot price is above max_price"),
    "QuotaExceeded": (QuotaExceeded, "region", _QUOTA),
}
_UNAUTHENTICATED = {"InvalidAuthenticationToken", "ExpiredAuthenticationToken", "AuthenticationFailed",
                    "InvalidAuthenticationTokenTenant", "InvalidAuthenticationTokenAudience"}
_FORBIDDEN = {"AuthorizationFailed", "LinkedAuthorizationFailed"}
_TRANSIENT = {"TooManyRequests", "InternalServerError", "ServiceUnavailable", "GatewayTimeout", "RetryableError",
              "InternalExecutionError", "OperationPreempted"}
_ACTION = re.compile(r"perform action '([^']+)'")


def retry_attempts() -> int:
    try:
        return max(1, int(os.environ.get("LAUNCHPAD_AZURE_RETRIES", ATTEMPTS)))
    except ValueError:
        return ATTEMPTS


def credential():
    """DefaultAzureCredential: the whole chain (env, workload identity, managed identity, Azure CLI, ...)."""
    try:
        from azure.identity import DefaultAzureCredential
    except ImportError:
        raise ProviderError("azure-identity is not installed", provider=NAME, hint="pip install launchpad-azure") from None
    return DefaultAzureCredential()


def client_kwargs(cred, endpoint: str, poll_interval: float | None) -> dict[str, Any]:
    """What every management client is built with: `endpoint`, one attempt per request, timeouts."""
    kwargs: dict[str, Any] = {"base_url": endpoint.rstrip("/"), "credential_scopes": [SCOPE], "retry_total": 0,
                              "connection_timeout": 10, "read_timeout": 120, "user_agent": "launchpad"}
    if poll_interval is not None:
        kwargs["polling_interval"] = float(poll_interval)
    if endpoint.startswith("http://"):
        host = urlsplit(endpoint).hostname or ""
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ProviderError(f"endpoint {endpoint}: plain http only on loopback", provider=NAME,
                                hint="use the https ARM endpoint of your cloud")
        kwargs["authentication_policy"] = _loopback_policy(cred)
    return kwargs


def _loopback_policy(cred):
    """ARM's bearer-token policy, allowed to send the token over http (loopback only: see client_kwargs)."""
    from azure.mgmt.core.policies import ARMChallengeAuthenticationPolicy

    class LoopbackHttpTokenPolicy(ARMChallengeAuthenticationPolicy):
        def on_request(self, request):
            request.context["enforce_https"] = False
            return super().on_request(request)

    return LoopbackHttpTokenPolicy(cred, SCOPE)


def error_code(e: BaseException) -> str:
    err = getattr(e, "error", None)
    code = str(getattr(err, "code", "") or "")
    for detail in getattr(err, "details", None) or []:  # a wrapper code (e.g. OperationFailed) with the real one inside
        if code not in _CAPACITY and getattr(detail, "code", None) in _CAPACITY:
            code = str(detail.code)
    return code


def translate(e: BaseException, operation: str, where: str = "") -> Exception:
    """The launchpad error for an azure-core/azure-identity exception raised by `operation` (e.g. "CreateVM")."""
    from azure.core.exceptions import ClientAuthenticationError, HttpResponseError, ServiceRequestError, ServiceResponseError

    at = f" in {where}" if where else ""
    response_status = getattr(e, "status_code", None)
    if isinstance(e, ClientAuthenticationError) and not response_status:  # from the credential, not from ARM
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return AuthError(f"no Azure credentials: {first[:200]}", provider=NAME, hint=CRED_HINT)
    if isinstance(e, (ServiceRequestError, ServiceResponseError)):
        return TransientError(f"cannot reach Azure{at}: {e}", provider=NAME)
    if not isinstance(e, HttpResponseError):
        return ProviderError(f"{operation}{at}: {e}", provider=NAME)
    code = error_code(e)
    message = str(getattr(e.error, "message", "") or e.message or "").strip()
    status = int(response_status or 0)
    if code in _CAPACITY:
        cls, scope, meaning = _CAPACITY[code]
        return cls(f"{code}{at}: {meaning}", provider=NAME, scope=scope)
    if code == "OperationNotAllowed" and "quota" in message.lower():
        return QuotaExceeded(f"{code}{at}: {_QUOTA}", provider=NAME, scope="region")
    if code == "OperationNotAllowed" and "maxprice" in message.lower().replace(" ", ""):
        return NoCapacity(f"{code}{at}: the spot price is above max_price", provider=NAME, scope="offer")
    if code in _FORBIDDEN or status == 403:
        found = _ACTION.search(message)
        action = found.group(1) if found else operation
        return AuthError(f"Azure refused {operation}{at}: the credentials lack the permission {action}", provider=NAME,
                         hint="grant it (see the launchpad-azure README for a least-privilege role)")
    if code in _UNAUTHENTICATED or status == 401:
        return AuthError(f"Azure rejected the credentials ({code or status}){at}: {message[:160]}", provider=NAME,
                         hint="check `az account show`; sign in again with `az login` if they expired")
    if code == "SubscriptionNotFound":
        return AuthError(f"{message[:200]}", provider=NAME,
                         hint="set subscription_id (or AZURE_SUBSCRIPTION_ID) to one these credentials can use")
    if code in _TRANSIENT or status == 429 or status >= 500:
        return TransientError(f"{operation}{at}: {code or status}: {message[:160]}", provider=NAME)
    return ProviderError(f"{operation}{at}: {code or status}: {message[:200]}", provider=NAME)


def not_found(e: BaseException) -> bool:
    return getattr(e, "status_code", None) == 404


def call(fn: Callable[[], Any], operation: str, where: str = "", *, missing_ok: bool = False) -> Any:
    """`fn()` (an SDK call, or a poller's `.result()` around one), retried on transient errors, errors
    translated. With `missing_ok`, a 404 answers None."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

    def before_sleep(state) -> None:
        log.warning("azure: %s failed (%s); retry %d/%d", operation, state.outcome.exception(),
                    state.attempt_number, retry_attempts() - 1)

    for attempt in Retrying(stop=stop_after_attempt(retry_attempts()),
                            wait=wait_random_exponential(multiplier=0.5, max=8),
                            retry=retry_if_exception_type(TransientError), reraise=True, before_sleep=before_sleep):
        with attempt:
            try:
                return fn()
            except Exception as e:
                if missing_ok and not_found(e):
                    return None
                if type(e).__module__.startswith("azure."):
                    raise translate(e, operation, where) from None
                raise
    raise AssertionError("unreachable")  # pragma: no cover
