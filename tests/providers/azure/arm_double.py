"""A loopback double of the Azure Resource Manager endpoints the azure provider calls, written from the
public REST API reference (learn.microsoft.com/rest/api: compute, virtualnetwork, resources,
authorization), state in memory, plus the VM's Instance Metadata Service token endpoint.

What it models, because the provider must cope with it on real Azure:
- asynchronous operations: PUT answers 201/200 with ``Azure-AsyncOperation``, DELETE and POST actions
  202 with ``Azure-AsyncOperation`` + ``Location``; an operation finishes `lro_seconds` after it was
  accepted, whether anyone polls or not (the SDK's real pollers follow the headers);
- ARM's rules: DELETE of a missing resource is 204; a NIC attached to a VM, or a public IP / NSG attached to
  a NIC, cannot be deleted (``NicInUse``, ``PublicIPAddressCannotBeDeleted``, ``InUseNetworkSecurityGroup
  CannotBeDeleted``); a VM's implicit OS disk gets NO tags (ARM does not copy the VM's); a VM's
  ``deleteOption: Delete`` on its OS disk and NIC deletes them with it; a role assignment outlives the VM
  whose identity it names; a failed VM create leaves the VM behind in provisioningState ``Failed``;
- bearer tokens: every call needs one this double issued; a token of a VM's managed identity may only touch
  resources under the scopes of that identity's role assignments (403 ``AuthorizationFailed`` naming the
  action otherwise);
- spot eviction: ``simulateEviction`` (a real ARM action) evicts per the VM's evictionPolicy: Deallocate ->
  deallocated, Delete -> the VM and its disks are deleted (the NIC, IP and NSG stay, as Azure documents).

INJECTED on request (Azure never fails on demand): `fail_next(method, type, code=...)` answers the next
matching request with an ARM error; ``at="operation"`` accepts the request and fails its asynchronous
operation instead, as an allocation failure arrives on real Azure.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from arm_resources import KINDS, TENANT, ArmError, ImdsIdentity, ResourceRules, now, public

__all__ = ["SUBSCRIPTION", "TENANT", "ArmDouble", "ImdsIdentity"]

SUBSCRIPTION = "00000000-0000-4000-8000-0000000000aa"

_ID = re.compile(r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)/providers/(?P<ns>[^/]+)/(?P<type>[^/]+)"
                 r"(?:/(?P<name>[^/]+)(?:/(?P<action>[^/]+))?)?$", re.I)
_RG = re.compile(r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups(?:/(?P<rg>[^/]+))?$", re.I)
_ROLE = re.compile(r"^(?P<scope>.*)/providers/Microsoft\.Authorization/roleAssignments/(?P<name>[^/]+)$", re.I)
_OP = re.compile(r"^/subscriptions/[^/]+/providers/[^/]+/locations/[^/]+/(?P<kind>operations|operationResults)/(?P<id>[^/]+)$",
                 re.I)


@dataclass
class Failure:
    method: str
    type: str
    code: str
    status: int
    message: str
    times: int
    at: str  # "request" | "operation"


@dataclass
class Operation:
    id: str
    done_at: float
    apply: Any  # callable run once when the operation finishes (None: nothing to do)
    error: dict | None = None
    finished: bool = False
    location: str = "eastus"
    namespace: str = "Microsoft.Compute"


@dataclass
class _Seen:
    method: str
    path: str
    principal: str | None
    status: int = 0
    body: Any = field(default=None)
    actions: list[str] = field(default_factory=list)  # the RBAC actions it needs, linked ones (join) included


class ArmDouble(ResourceRules):
    """`url` is the ARM base URL; `admin_token` is the token of the caller (the user running launchpad)."""

    def __init__(self, *, lro_seconds: float = 0.05, subscription: str = SUBSCRIPTION):
        self.subscription, self.lro_seconds = subscription, lro_seconds
        self.resources: dict[str, dict] = {}  # lower-cased id -> the resource as ARM returns it (+ "_" keys)
        self.role_assignments: dict[str, dict] = {}
        self.ops: dict[str, Operation] = {}
        self.failures: list[Failure] = []
        self.requests: list[_Seen] = []
        self.admin_token = "arm-admin-" + uuid.uuid4().hex
        self.tokens: dict[str, str | None] = {self.admin_token: None}  # token -> principal (None: the owner)
        self.lock = threading.RLock()
        self._ips = 0
        self._pending_failure: Failure | None = None
        self._current = _Seen("", "", None)
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = 1 << 16  # headers and body in one write: no delayed-ACK stall per keep-alive request
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                status, headers, body = double.handle(self.command, self.path, self.headers, raw)
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                for k, v in {"Content-Type": "application/json; charset=utf-8", "x-ms-request-id": uuid.uuid4().hex,
                             **headers}.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = do_HEAD = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> ArmDouble:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- for tests ----------------------------------------------------------------------------------
    def fail_next(self, method: str, type_: str, *, code: str, status: int = 400, message: str = "", times: int = 1,
                  at: str = "request") -> None:
        """INJECTION: the next `times` `method` requests on resources (or actions) of `type_` (e.g. "PUT",
        "virtualMachines"; "POST", "deallocate") answer ARM error `code` (at="operation": the request is
        accepted and its asynchronous operation fails with it)."""
        with self.lock:
            self.failures.append(Failure(method.upper(), type_.lower(), code, status, message or code, times, at))

    def token_for(self, principal: str) -> str:
        """A bearer token of `principal` (a VM's managed identity), as Entra ID would issue it."""
        token = f"mi-{principal}-{uuid.uuid4().hex[:8]}"
        with self.lock:
            self.tokens[token] = principal
        return token

    def of_type(self, type_: str, rg: str | None = None) -> list[dict]:
        """Live resources of `type_` ("virtualMachines", "disks", ...), optionally in resource group `rg`."""
        with self.lock:
            self._tick()
            return [public(r) for r in self.resources.values() if r["type"].split("/")[-1].lower() == type_.lower()
                    and (rg is None or f"/resourcegroups/{rg.lower()}/" in r["id"].lower())]

    def get(self, rid: str) -> dict | None:
        with self.lock:
            self._tick()
            r = self.resources.get(rid.lower())
            return public(r) if r else None

    def power(self, vm_name: str) -> str | None:
        with self.lock:
            self._tick()
            vm = next((r for r in self.resources.values() if r["type"] == "Microsoft.Compute/virtualMachines"
                       and r["name"].lower() == vm_name.lower()), None)
            return vm["_power"] if vm else None

    def settle(self, timeout: float = 10) -> None:
        """Wait until every accepted operation has finished."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                self._tick()
                if all(op.finished for op in self.ops.values()):
                    return
            time.sleep(0.02)
        raise AssertionError("operations still running")

    # -- dispatch -----------------------------------------------------------------------------------
    def handle(self, method: str, raw_path: str, headers, raw: bytes) -> tuple[int, dict, Any]:
        parts = urlsplit(raw_path)
        path, query = parts.path.rstrip("/"), {k.lower(): v[0] for k, v in parse_qs(parts.query).items()}
        body = json.loads(raw) if raw else None
        auth = headers.get("Authorization") or ""
        seen = _Seen(method, path, None, body=body)
        with self.lock:
            self.requests.append(seen)
            self._current = seen
            self._pending_failure = None
            self._tick()
            try:
                if not auth.startswith("Bearer "):
                    raise ArmError(401, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing.")
                token = auth[len("Bearer "):]
                if token not in self.tokens:
                    raise ArmError(401, "InvalidAuthenticationToken", "The access token is invalid.")
                seen.principal = self.tokens[token]
                if "api-version" not in query:
                    raise ArmError(400, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is "
                                   "required for all requests.")
                status, out_headers, out = self._route(method, path, query, body, seen.principal)
            except ArmError as e:
                status, out_headers, out = e.status, {}, {"error": {"code": e.code, "message": e.message}}
            seen.status = status
            return status, out_headers, out

    def _route(self, method, path, query, body, principal):
        m = _OP.match(path)
        if m:
            namespace = path.split("/providers/", 1)[1].split("/", 1)[0]
            self._current.actions.append(f"{namespace}/locations/operations/read")
            return self._operation(m.group("kind"), m.group("id"))
        m = _ROLE.match(path)
        if m:
            self._authorize(principal, method, m.group("scope"), "Microsoft.Authorization/roleAssignments", None)
            self._inject(method, "roleAssignments")
            return self._role(method, m.group("scope"), m.group("name"), body)
        m = _RG.match(path)
        if m:
            self._subscription(m.group("sub"))
            self._authorize(principal, method, path, "Microsoft.Resources/subscriptions/resourceGroups", None)
            self._inject(method, "resourcegroups")
            return self._resource_group(method, m.group("rg"), body)
        m = _ID.match(path)
        if not m:
            raise ArmError(404, "InvalidResourceType", f"no route for {method} {path}")
        self._subscription(m.group("sub"))
        rg = self._existing_rg(m.group("rg"))
        rtype = f"{m.group('ns')}/{m.group('type')}"
        self._authorize(principal, method, path, rtype, m.group("action"))
        self._inject(method, m.group("action") or m.group("type"))
        kind = KINDS.get(rtype.lower())
        if kind is None:
            raise ArmError(400, "InvalidResourceType", f"The resource type '{rtype}' is not supported by this double")
        if m.group("name") is None:
            if method != "GET":
                raise ArmError(405, "MethodNotAllowed", f"{method} on a collection")
            return 200, {}, {"value": [self._view(r, query) for r in self.resources.values()
                                       if r["type"].lower() == kind.lower() and r["_rg"] == rg["name"].lower()]}
        rid = f"/subscriptions/{self.subscription}/resourceGroups/{rg['name']}/providers/{kind}/{m.group('name')}"
        if m.group("action"):
            return self._action(method, rid, m.group("action"), query)
        return self._resource(method, rid, kind, m.group("name"), rg, body, query)

    def _subscription(self, sub: str) -> None:
        if sub.lower() != self.subscription.lower():
            raise ArmError(404, "SubscriptionNotFound", f"The subscription '{sub}' could not be found.")

    def _inject(self, method: str, type_: str) -> Failure | None:
        for f in self.failures:
            if f.method == method and f.type == type_.lower() and f.times > 0:
                f.times -= 1
                if f.at == "request":
                    raise ArmError(f.status, f.code, f.message)
                self._pending_failure = f
                return f
        return None

    def _take_operation_failure(self) -> dict | None:
        f, self._pending_failure = self._pending_failure, None
        return {"code": f.code, "message": f.message} if f else None

    def _authorize(self, principal, method, path, rtype, action) -> None:
        verb = f"{action}/action" if action and method == "POST" else {"GET": "read", "HEAD": "read", "PUT": "write",
                                                                       "PATCH": "write", "DELETE": "delete"}[method]
        if action and method == "GET":
            verb = f"{action}/read"
        wanted = f"{rtype}/{verb}"
        self._current.actions.append(wanted)
        if principal is None:
            return  # the subscription's owner
        for ra in self.role_assignments.values():
            scope = ra["properties"]["scope"].lower()
            if ra["properties"]["principalId"] == principal and (path.lower() == scope or path.lower().startswith(scope + "/")):
                return
        raise ArmError(403, "AuthorizationFailed", f"The client '{principal}' with object id '{principal}' does not have "
                       f"authorization to perform action '{wanted}' over scope '{path}' or the scope is invalid. If access "
                       "was recently granted, please refresh your credentials.")

    # -- asynchronous operations ------------------------------------------------------------------------
    def _tick(self) -> None:
        now = time.monotonic()
        for op in list(self.ops.values()):
            if not op.finished and now >= op.done_at:
                op.finished = True
                if op.apply is not None:
                    op.apply(op.error)

    def _accept(self, apply, *, location: str, namespace: str, error: dict | None = None) -> tuple[dict, Operation]:
        op = Operation(uuid.uuid4().hex, time.monotonic() + self.lro_seconds, apply, error, location=location,
                       namespace=namespace)
        self.ops[op.id] = op
        base = f"{self.url}/subscriptions/{self.subscription}/providers/{namespace}/locations/{location}"
        return {"Azure-AsyncOperation": f"{base}/operations/{op.id}?api-version=2024-07-01",
                "Location": f"{base}/operationResults/{op.id}?api-version=2024-07-01"}, op

    def _operation(self, kind: str, op_id: str):
        op = self.ops.get(op_id)
        if op is None:
            raise ArmError(404, "NotFound", f"operation {op_id} not found")
        if kind.lower() == "operationresults":
            return (202, {"Location": f"{self.url}/subscriptions/{self.subscription}/providers/{op.namespace}/locations/"
                                      f"{op.location}/operationResults/{op.id}?api-version=2024-07-01"}, None) \
                if not op.finished else (204 if op.error is None else 400, {}, None if op.error is None else {"error": op.error})
        if not op.finished:
            return 200, {}, {"name": op.id, "status": "InProgress", "startTime": now()}
        if op.error:
            return 200, {}, {"name": op.id, "status": "Failed", "error": op.error, "endTime": now()}
        return 200, {}, {"name": op.id, "status": "Succeeded", "endTime": now()}

    # -- resource groups and role assignments ---------------------------------------------------------------
    def _existing_rg(self, name: str) -> dict:
        rg = self.resources.get(f"/subscriptions/{self.subscription}/resourcegroups/{name}".lower())
        if rg is None:
            raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{name}' could not be found.")
        return rg

    def _resource_group(self, method, name, body):
        if name is None:
            if method != "GET":
                raise ArmError(405, "MethodNotAllowed", method)
            groups = [public(r) for r in self.resources.values() if r["type"] == "Microsoft.Resources/resourceGroups"]
            return 200, {}, {"value": groups}
        rid = f"/subscriptions/{self.subscription}/resourceGroups/{name}"
        found = self.resources.get(rid.lower())
        if method in ("GET", "HEAD"):
            if found is None:
                raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{name}' could not be found.")
            return (204 if method == "HEAD" else 200), {}, None if method == "HEAD" else public(found)
        if method == "PUT":
            if not (body or {}).get("location"):
                raise ArmError(400, "LocationRequired", "The location property is required for this definition.")
            rg = {"id": rid, "name": name, "type": "Microsoft.Resources/resourceGroups", "location": body["location"],
                  "tags": body.get("tags") or {}, "properties": {"provisioningState": "Succeeded"}, "_rg": name.lower()}
            self.resources[rid.lower()] = rg
            return (200 if found else 201), {}, public(rg)
        raise ArmError(405, "MethodNotAllowed", method)

    def _role(self, method, scope, name, body):
        rid = f"{scope}/providers/Microsoft.Authorization/roleAssignments/{name}"
        found = self.role_assignments.get(rid.lower())
        if method == "GET":
            if found is None:
                raise ArmError(404, "RoleAssignmentNotFound", "The role assignment was not found.")
            return 200, {}, found
        if method == "DELETE":
            self.role_assignments.pop(rid.lower(), None)
            return (200, {}, found) if found else (204, {}, None)
        if method != "PUT":
            raise ArmError(405, "MethodNotAllowed", method)
        props = (body or {}).get("properties") or {}
        principal, role = props.get("principalId"), props.get("roleDefinitionId")
        if not principal or not role:
            raise ArmError(400, "InvalidRoleAssignmentRequest", "principalId and roleDefinitionId are required")
        known = {(r.get("identity") or {}).get("principalId") for r in self.resources.values()}
        if principal not in known:
            raise ArmError(400, "PrincipalNotFound", f"Principal {principal} does not exist in the directory {TENANT}.")
        for other in self.role_assignments.values():
            p = other["properties"]
            if other["id"].lower() != rid.lower() and (p["scope"].lower(), p["principalId"], p["roleDefinitionId"].lower()) == (
                    scope.lower(), principal, role.lower()):
                raise ArmError(409, "RoleAssignmentExists", "The role assignment already exists.")
        ra = {"id": rid, "name": name, "type": "Microsoft.Authorization/roleAssignments",
              "properties": {"scope": scope, "principalId": principal, "roleDefinitionId": role,
                             "principalType": props.get("principalType") or "ServicePrincipal"}}
        self.role_assignments[rid.lower()] = ra
        return 201, {}, ra
