"""boto3 clients for launchpad, and EC2's errors mapped onto launchpad's exception tree.

Retries: botocore's own retry layer is switched off (one attempt per call) and `call` retries only the
transient errors (throttling, 5xx, dropped connections) with tenacity: bounded, jittered, logged.
Everything else becomes a `LaunchpadError` with a message a user can act on:

    capacity / quota / price        -> NoCapacity / QuotaExceeded, scoped zone | region | offer
    AuthFailure, UnauthorizedOperation, expired credentials -> AuthError naming the missing permission
    anything else                   -> ProviderError
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from typing import Any

from launchpad.errors import (
    AuthError,
    NoCapacity,
    ProviderError,
    QuotaExceeded,
    TransientError,
)

log = logging.getLogger("launchpad.aws")

NAME = "aws"
ATTEMPTS = 5  # LAUNCHPAD_AWS_RETRIES overrides (>= 1)

# error code -> (exception class, scope, what it means for the user)
_CAPACITY: dict[str, tuple[type[NoCapacity], str, str]] = {
    "InsufficientInstanceCapacity": (NoCapacity, "zone", "AWS has no capacity for this type in this zone now"),
    "InsufficientHostCapacity": (NoCapacity, "zone", "AWS has no capacity for this type in this zone now"),
    "InstanceLimitExceeded": (QuotaExceeded, "region", "the account's instance quota in this region is used up "
                              "(request more in Service Quotas)"),
    "VcpuLimitExceeded": (QuotaExceeded, "region", "the account's vCPU quota for this instance family is used up "
                          "(request more in Service Quotas: 'Running On-Demand ... instances')"),
    "MaxSpotInstanceCountExceeded": (QuotaExceeded, "region", "the account's spot instance quota in this region is "
                                     "used up (request more in Service Quotas: 'All ... Spot Instance Requests')"),
    "SpotMaxPriceTooLow": (NoCapacity, "offer", "the spot price is above the maximum price"),
    "Unsupported": (NoCapacity, "offer", "this instance type is not offered here"),
    "InsufficientFreeAddressesInSubnet": (NoCapacity, "zone", "the zone's subnet has no free addresses"),
}
_AUTH = {"AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch",
         "ExpiredToken", "ExpiredTokenException", "RequestExpired", "OptInRequired", "AccessDenied",
         "UnrecognizedClientException", "InvalidAccessKeyId"}
_TRANSIENT = {"RequestLimitExceeded", "Throttling", "ThrottlingException", "InternalError", "InternalFailure",
              "ServiceUnavailable", "Unavailable", "SlowDown", "RequestTimeout", "RequestTimeoutException"}
_PERMISSION = re.compile(r"perform:\s*([a-z0-9-]+:[A-Za-z0-9]+)")


def retry_attempts() -> int:
    try:
        return max(1, int(os.environ.get("LAUNCHPAD_AWS_RETRIES", ATTEMPTS)))
    except ValueError:
        return ATTEMPTS


def session(profile: str | None = None):
    """A boto3 session on the default credential chain (env, profile, SSO, instance role)."""
    try:
        import boto3
    except ImportError:
        raise ProviderError("boto3 is not installed", provider=NAME, hint="pip install launchpad-aws") from None
    return boto3.session.Session(profile_name=profile) if profile else boto3.session.Session()


def client(sess, service: str, region: str | None):
    from botocore.config import Config

    # one attempt per call: `call` below decides what is worth retrying
    cfg = Config(retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=10, read_timeout=60,
                 user_agent_extra="launchpad")
    return sess.client(service, region_name=region, config=cfg)


def error_code(e: BaseException) -> str:
    return str(getattr(e, "response", {}).get("Error", {}).get("Code", "")) if hasattr(e, "response") else ""


def translate(e: BaseException, operation: str, where: str = "") -> Exception:
    """The launchpad error for a botocore exception raised by `operation` (e.g. "RunInstances")."""
    from botocore.exceptions import (
        ClientError,
        ConnectionError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
        ReadTimeoutError,
    )

    at = f" in {where}" if where else ""
    if isinstance(e, (NoCredentialsError, PartialCredentialsError)):
        return AuthError(f"no AWS credentials: {e}", provider=NAME,
                         hint="run `aws configure` or `aws sso login`, or set AWS_PROFILE")
    if isinstance(e, NoRegionError):
        return ProviderError("no AWS region", provider=NAME, hint="set AWS_DEFAULT_REGION or `regions:` in config.yaml")
    if isinstance(e, (EndpointConnectionError, ConnectionError, ReadTimeoutError)):
        return TransientError(f"cannot reach AWS{at}: {e}", provider=NAME)
    if not isinstance(e, ClientError):
        return ProviderError(f"{operation}{at}: {e}", provider=NAME)
    code = error_code(e)
    message = str(e.response.get("Error", {}).get("Message", "")).strip()
    status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    if code in _CAPACITY:
        cls, scope, meaning = _CAPACITY[code]
        return cls(f"{code}{at}: {meaning}", provider=NAME, scope=scope)
    if code in _AUTH:
        found = _PERMISSION.search(message)
        permission = found.group(1) if found else f"{_service(operation)}:{operation}"
        if code in ("UnauthorizedOperation", "AccessDenied"):
            return AuthError(f"AWS refused {operation}{at}: the credentials lack the permission {permission}",
                             provider=NAME, hint="add it to the IAM policy (see the launchpad-aws README)")
        return AuthError(f"AWS rejected the credentials ({code}){at}: {message[:160]}", provider=NAME,
                         hint="check `aws sts get-caller-identity`; refresh with `aws sso login` if they expired")
    if code in _TRANSIENT or status >= 500:
        return TransientError(f"{operation}{at}: {code or status}: {message[:160]}", provider=NAME)
    return ProviderError(f"{operation}{at}: {code}: {message[:200]}", provider=NAME)


def _service(operation: str) -> str:
    return "s3" if operation in ("CreateBucket", "HeadBucket", "PutBucketTagging") else "ec2"


def call(fn: Callable[..., Any], operation: str, where: str = "", **kwargs: Any) -> Any:
    """`fn(**kwargs)` (a boto3 client method), retried on transient errors, errors translated."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

    def before_sleep(state) -> None:
        log.warning("aws: %s failed (%s); retry %d/%d", operation, state.outcome.exception(),
                    state.attempt_number, retry_attempts() - 1)

    for attempt in Retrying(stop=stop_after_attempt(retry_attempts()),
                            wait=wait_random_exponential(multiplier=0.5, max=8),
                            retry=retry_if_exception_type(TransientError), reraise=True, before_sleep=before_sleep):
        with attempt:
            try:
                return fn(**kwargs)
            except Exception as e:
                if type(e).__module__.startswith(("botocore", "boto3")):
                    raise translate(e, operation, where) from None
                raise
    raise AssertionError("unreachable")  # pragma: no cover
