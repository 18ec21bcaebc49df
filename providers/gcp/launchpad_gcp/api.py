"""google-cloud-compute clients for launchpad, and Compute Engine's errors mapped onto launchpad's tree.

Credentials: Application Default Credentials (``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth
application-default login``, workload identity, a VM's service account); launchpad never stores them.
The REST transport is used (no gRPC channel to keep alive), pointed at config ``endpoint`` when set.

Long-running operations: ``*_unary`` calls return the Operation, and `wait_op` waits on it through the
operations client's ``wait`` (which honours the endpoint; the SDK's own ``.result()`` poller does not).

Retries: the SDK's own retry is off (``retry=None``); `call` retries only the transient errors
(429, 5xx, dropped connections) with tenacity: bounded, jittered, logged. Everything else becomes a
`LaunchpadError` a user can act on:

    ZONE_RESOURCE_POOL_EXHAUSTED (a stockout)            -> NoCapacity, scope zone
    QUOTA_EXCEEDED "... in region R"                      -> QuotaExceeded, scope region
    QUOTA_EXCEEDED "... globally" (GPUS_ALL_REGIONS)      -> QuotaExceeded, scope offer
    the machine type / accelerator not offered in a zone -> NoCapacity, scope zone
    401, 403 "Required 'compute.x.y' permission"         -> AuthError naming the permission
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable
from typing import Any

from launchpad.errors import AuthError, NoCapacity, NotConfigured, ProviderError, QuotaExceeded, TransientError

log = logging.getLogger("launchpad.gcp")

NAME = "gcp"
ATTEMPTS = 5  # LAUNCHPAD_GCP_RETRIES overrides (>= 1)
SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
_ADC_HINT = "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a key file"
_PERMISSION = re.compile(r"[Rr]equired '([a-z]+\.[A-Za-z.]+)' permission")
_STOCKOUT = ("ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS")
_NOT_IN_ZONE = ("does not exist in zone", "is not available in zone", "not supported in zone",
                "acceleratorTypes", "machineTypes")
_TRANSIENT_STATUS = {429, 500, 502, 503, 504}


def retry_attempts() -> int:
    try:
        return max(1, int(os.environ.get("LAUNCHPAD_GCP_RETRIES", ATTEMPTS)))
    except ValueError:
        return ATTEMPTS


def credentials(project: str | None = None) -> tuple[Any, str | None]:
    """ADC and the project they name (config `project` wins). NotConfigured when there are none."""
    try:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
    except ImportError:
        raise NotConfigured("google-cloud-compute is not installed", provider=NAME,
                            hint="pip install launchpad-gcp") from None
    if not _any_credential_source():  # say so at once: google-auth would first probe the metadata server
        raise NotConfigured("no Google Cloud credentials (Application Default Credentials) found", provider=NAME,
                            hint=_ADC_HINT)
    try:
        creds, found = google.auth.default(scopes=SCOPES, quota_project_id=None)
    except DefaultCredentialsError as e:
        first = str(e).split(". ")[0]
        raise NotConfigured(f"no Google Cloud credentials (Application Default Credentials): {first}",
                            provider=NAME, hint=_ADC_HINT) from None
    return creds, project or found or os.environ.get("GOOGLE_CLOUD_PROJECT")


def _any_credential_source() -> bool:
    """Is there anything ADC could find? A key file, gcloud's ADC file, a metadata server named by env, or
    this machine being a GCE VM (its DMI product name, as google-auth itself checks on Linux)."""
    if os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or os.environ.get("GCE_METADATA_HOST"):
        return True
    gcloud = os.environ.get("CLOUDSDK_CONFIG") or os.path.join(os.path.expanduser("~"), ".config", "gcloud")
    if os.path.exists(os.path.join(gcloud, "application_default_credentials.json")):
        return True
    try:
        with open("/sys/class/dmi/id/product_name") as f:
            return f.read().strip().startswith("Google")
    except OSError:
        return os.name == "nt"  # no DMI to read: let google-auth decide


def client(kind: str, creds: Any, endpoint: str | None):
    """A compute_v1 REST client, e.g. kind="InstancesClient"."""
    from google.api_core.client_options import ClientOptions
    from google.cloud import compute_v1

    options = ClientOptions(api_endpoint=endpoint) if endpoint else None
    return getattr(compute_v1, kind)(credentials=creds, transport="rest", client_options=options)


def as_dict(message: Any) -> dict:
    """A compute_v1 message as the REST API's JSON (camelCase names, enum names)."""
    return type(message).to_dict(message, preserving_proto_field_name=False, use_integers_for_enums=False)


def message(kind: str, data: dict) -> Any:
    """A compute_v1 message (e.g. "Instance") from the REST API's JSON form."""
    from google.cloud import compute_v1

    return getattr(compute_v1, kind).from_json(json.dumps(data))


def op_error(op: dict, operation: str, where: str = "") -> Exception | None:
    """The launchpad error for a finished Operation's `error`, or None if it succeeded."""
    errors = (op.get("error") or {}).get("errors") or []
    if not errors:
        return None
    first = errors[0]
    return _classify(str(first.get("code", "")), str(first.get("message", "")), int(op.get("httpErrorStatusCode") or 400),
                     operation, where)


def _classify(code: str, text: str, status: int, operation: str, where: str) -> Exception:
    at = f" in {where}" if where else ""
    short = text.strip()[:200]
    if code in _STOCKOUT or "ZONE_RESOURCE_POOL_EXHAUSTED" in text:
        return NoCapacity(f"{code}{at}: GCE has no capacity for this machine in this zone now", provider=NAME,
                          scope="zone")
    if code in ("QUOTA_EXCEEDED", "quotaExceeded") or ("Quota '" in text and "exceeded" in text):
        scope = "offer" if "globally" in text or "GPUS_ALL_REGIONS" in text else "region"
        return QuotaExceeded(f"QUOTA_EXCEEDED{at}: {short} (request more under IAM & Admin > Quotas)", provider=NAME,
                             scope=scope)
    if status in (401,) or code in ("authError", "UNAUTHENTICATED"):
        return AuthError(f"Google Cloud rejected the credentials{at}: {short}", provider=NAME, hint=_ADC_HINT)
    if status == 403 or code in ("forbidden", "PERMISSION_DENIED"):
        found = _PERMISSION.search(text)
        what = f"the permission {found.group(1)}" if found else f"the permission for {operation}"
        return AuthError(f"Google Cloud refused {operation}{at}: the credentials lack {what}", provider=NAME,
                         hint="grant it to the account (see the launchpad-gcp README for the least-privilege role)")
    if status in _TRANSIENT_STATUS or code in ("rateLimitExceeded", "backendError", "internalError"):
        return TransientError(f"{operation}{at}: {code or status}: {short}", provider=NAME)
    if any(s in text for s in _NOT_IN_ZONE) and ("zone" in text or "Zone" in text):
        return NoCapacity(f"{operation}{at}: {short}", provider=NAME, scope="zone")
    return ProviderError(f"{operation}{at}: {code or status}: {short}", provider=NAME)


def translate(e: BaseException, operation: str, where: str = "") -> Exception:
    """The launchpad error for an exception from google-api-core / google-auth / requests."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as aexc

    at = f" in {where}" if where else ""
    if isinstance(e, aexc.DefaultCredentialsError):
        return NotConfigured(f"no Google Cloud credentials: {e}", provider=NAME, hint=_ADC_HINT)
    if isinstance(e, aexc.RefreshError):
        return AuthError(f"Google Cloud credentials could not be refreshed: {str(e)[:160]}", provider=NAME, hint=_ADC_HINT)
    if isinstance(e, aexc.TransportError):
        return TransientError(f"cannot reach Google Cloud{at}: {e}", provider=NAME)
    if isinstance(e, gexc.GoogleAPICallError):
        status = int(e.code or 0) if isinstance(e.code, int) else 0
        reasons = [str(x.get("reason", "")) for x in (e.errors or []) if isinstance(x, dict)]
        return _classify(reasons[0] if reasons else "", str(e.message or e), status, operation, where)
    if isinstance(e, (gexc.RetryError, ConnectionError, TimeoutError)) or type(e).__module__.startswith(
            ("requests", "urllib3")):
        return TransientError(f"cannot reach Google Cloud{at}: {e}", provider=NAME)
    return ProviderError(f"{operation}{at}: {e}", provider=NAME)


def is_not_found(e: BaseException) -> bool:
    from google.api_core import exceptions as gexc

    return isinstance(e, gexc.NotFound)


def call(fn: Callable[..., Any], operation: str, where: str = "", *, not_found: Any = ..., **kwargs: Any) -> Any:
    """`fn(**kwargs)` (a compute_v1 client method), retried on transient errors, errors translated; a 404
    returns `not_found` when one is given. Messages come back as dicts (`as_dict`)."""
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_random_exponential

    def before_sleep(state) -> None:
        log.warning("gcp: %s failed (%s); retry %d/%d", operation, state.outcome.exception(),
                    state.attempt_number, retry_attempts() - 1)

    kwargs.setdefault("retry", None)
    kwargs.setdefault("timeout", 60)
    for attempt in Retrying(stop=stop_after_attempt(retry_attempts()),
                            wait=wait_random_exponential(multiplier=0.5, max=8),
                            retry=retry_if_exception_type(TransientError), reraise=True, before_sleep=before_sleep):
        with attempt:
            try:
                out = fn(**kwargs)
                if hasattr(out, "pages"):  # a list pager: every page, fetched here (inside the retry)
                    return _merge([as_dict(page) for page in out.pages])
            except Exception as e:
                if not_found is not ... and is_not_found(e):
                    return not_found
                if type(e).__module__.startswith(("google", "requests", "urllib3")) or isinstance(e, ConnectionError):
                    raise translate(e, operation, where) from None
                raise
            return as_dict(out) if hasattr(type(out), "to_dict") and hasattr(type(out), "pb") else out
    raise AssertionError("unreachable")  # pragma: no cover


def _merge(pages: list[dict]) -> dict:
    """The pages of a list (`items` a list) or aggregated list (`items` a map of scopes) as one page."""
    merged: dict[str, Any] = {}
    for page in pages:
        items = page.get("items")
        if isinstance(items, dict):
            merged.setdefault("items", {}).update(items)
        elif items:
            merged.setdefault("items", []).extend(items)
    return merged


def wait_op(ops_client: Any, op: dict, operation: str, where: str, *, timeout: float = 600, polls: int | None = None,
            **scope: str) -> dict:
    """Wait until `op` (an Operation dict) is DONE, through the operations client's `wait` (each call
    returns when the operation is done or after about two minutes), at most `polls` calls when given;
    raise its error, translated. Not done in time: TransientError."""
    deadline, calls = time.monotonic() + timeout, 0
    while op.get("status") != "DONE":
        if time.monotonic() > deadline or (polls is not None and calls >= polls):
            raise TransientError(f"{operation}{' in ' + where if where else ''}: operation {op.get('name')} "
                                 "is not done yet", provider=NAME)
        op = call(ops_client.wait, f"{operation} (wait)", where, request={"operation": op["name"], **scope}, timeout=150)
        calls += 1
    err = op_error(op, operation, where)
    if err is not None:
        raise err
    return op
