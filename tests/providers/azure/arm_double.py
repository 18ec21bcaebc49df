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

SUBSCRIPTION = "00000000-0000-4000-8000-0000000000aa"
TENANT = "00000000-0000-4000-8000-0000000000bb"
RESERVED_USERS = {"root", "admin", "administrator", "user", "guest", "test", "sys", "support"}

_ID = re.compile(r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)/providers/(?P<ns>[^/]+)/(?P<type>[^/]+)"
                 r"(?:/(?P<name>[^/]+)(?:/(?P<action>[^/]+))?)?$", re.I)
_RG = re.compile(r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups(?:/(?P<rg>[^/]+))?$", re.I)
_ROLE = re.compile(r"^(?P<scope>.*)/providers/Microsoft\.Authorization/roleAssignments/(?P<name>[^/]+)$", re.I)
_OP = re.compile(r"^/subscriptions/[^/]+/providers/[^/]+/locations/[^/]+/(?P<kind>operations|operationResults)/(?P<id>[^/]+)$",
                 re.I)


class ArmError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


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


class ArmDouble:
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
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

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
            return [_public(r) for r in self.resources.values() if r["type"].split("/")[-1].lower() == type_.lower()
                    and (rg is None or f"/resourcegroups/{rg.lower()}/" in r["id"].lower())]

    def get(self, rid: str) -> dict | None:
        with self.lock:
            self._tick()
            r = self.resources.get(rid.lower())
            return _public(r) if r else None

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
                    raise ArmError(400, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required "
                                   "for all requests.")
                status, out_headers, out = self._route(method, path, query, body, seen.principal)
            except ArmError as e:
                status, out_headers, out = e.status, {}, {"error": {"code": e.code, "message": e.message}}
            seen.status = status
            return status, out_headers, out

    def _route(self, method, path, query, body, principal):
        m = _OP.match(path)
        if m:
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
        kind = _KINDS.get(rtype.lower())
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
        if principal is None:
            return  # the subscription's owner
        verb = f"{action}/action" if action and method == "POST" else {"GET": "read", "HEAD": "read", "PUT": "write",
                                                                       "PATCH": "write", "DELETE": "delete"}[method]
        wanted = f"{rtype}/{verb}"
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
            return 200, {}, {"name": op.id, "status": "InProgress", "startTime": _now()}
        if op.error:
            return 200, {}, {"name": op.id, "status": "Failed", "error": op.error, "endTime": _now()}
        return 200, {}, {"name": op.id, "status": "Succeeded", "endTime": _now()}

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
            return 200, {}, {"value": [_public(r) for r in self.resources.values() if r["type"] == "Microsoft.Resources/resourceGroups"]}
        rid = f"/subscriptions/{self.subscription}/resourceGroups/{name}"
        found = self.resources.get(rid.lower())
        if method in ("GET", "HEAD"):
            if found is None:
                raise ArmError(404, "ResourceGroupNotFound", f"Resource group '{name}' could not be found.")
            return (204 if method == "HEAD" else 200), {}, None if method == "HEAD" else _public(found)
        if method == "PUT":
            if not (body or {}).get("location"):
                raise ArmError(400, "LocationRequired", "The location property is required for this definition.")
            rg = {"id": rid, "name": name, "type": "Microsoft.Resources/resourceGroups", "location": body["location"],
                  "tags": body.get("tags") or {}, "properties": {"provisioningState": "Succeeded"}, "_rg": name.lower()}
            self.resources[rid.lower()] = rg
            return (200 if found else 201), {}, _public(rg)
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

    # -- resources ---------------------------------------------------------------------------------------
    def _view(self, r: dict, query: dict) -> dict:
        out = _public(r)
        if r["type"] == "Microsoft.Compute/virtualMachines" and query.get("$expand", "").lower() == "instanceview":
            out["properties"]["instanceView"] = _instance_view(r)
        return out

    def _resource(self, method, rid, kind, name, rg, body, query):
        found = self.resources.get(rid.lower())
        ns = kind.split("/")[0]
        if method == "GET":
            if found is None:
                raise ArmError(404, "ResourceNotFound", f"The Resource '{kind}/{name}' under resource group "
                               f"'{rg['name']}' was not found.")
            return 200, {}, self._view(found, query)
        if method == "DELETE":
            if found is None:
                return 204, {}, None
            self._check_delete(found)
            found["properties"]["provisioningState"] = "Deleting"
            headers, _ = self._accept(lambda err, r=found: self._delete(r), location=found["location"], namespace=ns)
            return 202, headers, None
        if method == "PATCH":
            if found is None:
                raise ArmError(404, "ResourceNotFound", f"{kind}/{name} not found")
            if "tags" in (body or {}):
                found["tags"] = dict(body["tags"] or {})
            headers, _ = self._accept(None, location=found["location"], namespace=ns)
            return 200, headers, _public(found)
        if method != "PUT":
            raise ArmError(405, "MethodNotAllowed", method)
        body = body or {}
        if not body.get("location"):
            raise ArmError(400, "LocationRequired", "The location property is required for this definition.")
        make = {"Microsoft.Network/networkSecurityGroups": self._put_nsg, "Microsoft.Network/publicIPAddresses": self._put_ip,
                "Microsoft.Network/networkInterfaces": self._put_nic, "Microsoft.Network/virtualNetworks": self._put_vnet,
                "Microsoft.Compute/virtualMachines": self._put_vm}.get(kind)
        if make is None:
            raise ArmError(405, "MethodNotAllowed", f"PUT {kind} is not implemented by this double")
        new = {"id": rid, "name": name, "type": kind, "location": body["location"], "tags": dict(body.get("tags") or {}),
               "_rg": rg["name"].lower()}
        if found and found["properties"].get("provisioningState") == "Deleting":
            raise ArmError(409, "OperationNotAllowed", f"{name} is being deleted")
        resource, apply = make(new, found, body)
        failure = self._take_operation_failure()
        resource["properties"]["provisioningState"] = "Updating" if found else "Creating"
        self.resources[rid.lower()] = resource

        def finish(err, r=resource):
            r["properties"]["provisioningState"] = "Failed" if err else "Succeeded"
            if apply is not None:
                apply(err)

        headers, _ = self._accept(finish, location=body["location"], namespace=ns, error=failure)
        return (200 if found else 201), headers, _public(resource)

    def _ref(self, ref: dict | None, kind: str, what: str) -> dict:
        rid = (ref or {}).get("id") or ""
        r = self.resources.get(rid.lower())
        if r is None or r["type"] != kind:
            raise ArmError(400, "InvalidResourceReference", f"Resource {rid} referenced by {what} was not found.")
        return r

    def _put_nsg(self, new, found, body):
        rules = []
        for rule in (body.get("properties") or {}).get("securityRules") or []:
            p = rule.get("properties") or {}
            for key in ("protocol", "access", "direction", "priority"):
                if key not in p:
                    raise ArmError(400, "InvalidRequestFormat", f"securityRules {rule.get('name')}: {key} is required")
            rules.append({"name": rule["name"], "id": f"{new['id']}/securityRules/{rule['name']}", "properties": dict(p)})
        new["properties"] = {"securityRules": rules, "resourceGuid": str(uuid.uuid4()),
                             "networkInterfaces": (found or {}).get("properties", {}).get("networkInterfaces", [])}
        return new, None

    def _put_ip(self, new, found, body):
        p = body.get("properties") or {}
        sku = (body.get("sku") or {}).get("name", "Basic")
        if sku == "Standard" and p.get("publicIPAllocationMethod", "Dynamic") != "Static":
            raise ArmError(400, "StandardSkuPublicIPAddressesMustBeStatic", "Standard sku public IP addresses must be Static")
        if found:
            address = found["properties"].get("ipAddress")
        else:
            self._ips += 1
            address = f"203.0.113.{self._ips % 250 + 1}"  # TEST-NET-3: never routed, never contacted
        new["sku"] = {"name": sku}
        new["properties"] = {"publicIPAllocationMethod": p.get("publicIPAllocationMethod", "Dynamic"),
                             "publicIPAddressVersion": p.get("publicIPAddressVersion", "IPv4"), "ipAddress": address,
                             "ipConfiguration": (found or {}).get("properties", {}).get("ipConfiguration")}
        return new, None

    def _put_vnet(self, new, found, body):
        p = body.get("properties") or {}
        if not ((p.get("addressSpace") or {}).get("addressPrefixes")):
            raise ArmError(400, "InvalidRequestFormat", "addressSpace.addressPrefixes is required")
        subnets = [{"name": s["name"], "id": f"{new['id']}/subnets/{s['name']}",
                    "properties": {"addressPrefix": (s.get("properties") or {}).get("addressPrefix"),
                                   "provisioningState": "Succeeded"}} for s in p.get("subnets") or []]
        new["properties"] = {"addressSpace": p["addressSpace"], "subnets": subnets}
        return new, None

    def _put_nic(self, new, found, body):
        p = body.get("properties") or {}
        configs = []
        for i, c in enumerate(p.get("ipConfigurations") or []):
            cp = c.get("properties") or {}
            subnet_id = (cp.get("subnet") or {}).get("id") or ""
            vnet_id, _, subnet = subnet_id.rpartition("/subnets/")
            vnet = self.resources.get(vnet_id.lower())
            if vnet is None or not any(s["name"] == subnet for s in vnet["properties"]["subnets"]):
                raise ArmError(400, "InvalidResourceReference", f"Subnet {subnet_id} referenced by {new['id']} was not found.")
            config = {"name": c["name"], "id": f"{new['id']}/ipConfigurations/{c['name']}",
                      "properties": {"subnet": {"id": subnet_id}, "privateIPAllocationMethod": "Dynamic", "primary": i == 0,
                                     "privateIPAddress": (found and found["properties"]["ipConfigurations"][i]["properties"]
                                                          .get("privateIPAddress")) or f"10.0.0.{len(self.resources) % 250 + 4}"}}
            if cp.get("publicIPAddress"):
                ip = self._ref(cp["publicIPAddress"], "Microsoft.Network/publicIPAddresses", new["id"])
                holder = (ip["properties"].get("ipConfiguration") or {}).get("id", "")
                if holder and not holder.lower().startswith(new["id"].lower()):
                    raise ArmError(400, "PublicIPAddressInUse", f"{ip['id']} is in use by {holder}")
                ip["properties"]["ipConfiguration"] = {"id": config["id"]}
                config["properties"]["publicIPAddress"] = {"id": ip["id"]}
            configs.append(config)
        if not configs:
            raise ArmError(400, "NetworkInterfaceMustHaveIpConfiguration", "at least one ipConfiguration is required")
        new["properties"] = {"ipConfigurations": configs,
                             "enableAcceleratedNetworking": bool(p.get("enableAcceleratedNetworking")),
                             "virtualMachine": (found or {}).get("properties", {}).get("virtualMachine")}
        if p.get("networkSecurityGroup"):
            nsg = self._ref(p["networkSecurityGroup"], "Microsoft.Network/networkSecurityGroups", new["id"])
            new["properties"]["networkSecurityGroup"] = {"id": nsg["id"]}
            if not any(n["id"].lower() == new["id"].lower() for n in nsg["properties"]["networkInterfaces"]):
                nsg["properties"]["networkInterfaces"].append({"id": new["id"]})
        return new, None

    def _put_vm(self, new, found, body):
        p = body.get("properties") or {}
        size = (p.get("hardwareProfile") or {}).get("vmSize")
        if not size:
            raise ArmError(400, "InvalidParameter", "Required parameter 'hardwareProfile.vmSize' is missing (null).")
        storage = p.get("storageProfile") or {}
        image = storage.get("imageReference") or {}
        if not (image.get("id") or all(image.get(k) for k in ("publisher", "offer", "sku", "version"))):
            raise ArmError(400, "InvalidParameter", "storageProfile.imageReference needs an id or publisher, offer, sku "
                           "and version")
        os_profile = p.get("osProfile") or {}
        user = os_profile.get("adminUsername") or ""
        if not user or user.lower() in RESERVED_USERS:
            raise ArmError(400, "InvalidParameter", f"The Admin Username specified is not allowed: {user!r}")
        linux = os_profile.get("linuxConfiguration") or {}
        keys = (linux.get("ssh") or {}).get("publicKeys") or []
        if linux.get("disablePasswordAuthentication") and not keys:
            raise ArmError(400, "InvalidParameter", "Authentication using either SSH or by user name and password must be "
                           "enabled in Linux profile.")
        if not linux.get("disablePasswordAuthentication") and not os_profile.get("adminPassword"):
            raise ArmError(400, "InvalidParameter", "Required parameter 'adminPassword' is missing (null).")
        for key in keys:
            if not str(key.get("keyData", "")).startswith(("ssh-rsa ", "ssh-ed25519 ")):
                raise ArmError(400, "InvalidParameter", "The value of parameter linuxConfiguration.ssh.publicKeys.keyData is "
                               "invalid.")
        priority = p.get("priority") or "Regular"
        if priority == "Spot" and p.get("evictionPolicy") not in ("Deallocate", "Delete"):
            raise ArmError(400, "InvalidParameter", "evictionPolicy must be Deallocate or Delete for a Spot VM")
        if priority != "Spot" and (p.get("evictionPolicy") or p.get("billingProfile")):
            raise ArmError(400, "InvalidParameter", "evictionPolicy and billingProfile are only for Spot VMs")
        nics = (p.get("networkProfile") or {}).get("networkInterfaces") or []
        if not nics:
            raise ArmError(400, "InvalidParameter", "networkProfile.networkInterfaces is required")
        nic_resources = []
        for ref in nics:
            nic = self._ref(ref, "Microsoft.Network/networkInterfaces", new["id"])
            holder = (nic["properties"].get("virtualMachine") or {}).get("id")
            if holder and holder.lower() != new["id"].lower():
                raise ArmError(400, "NicInUse", f"Network interface {nic['id']} is used by existing VM {holder}.")
            if nic["location"] != new["location"]:
                raise ArmError(400, "InvalidResourceReference", f"{nic['id']} is in {nic['location']}, not {new['location']}")
            nic_resources.append(nic)
        os_disk = dict(storage.get("osDisk") or {})
        disk_name = os_disk.get("name") or f"{new['name']}_OsDisk_1_{uuid.uuid4().hex[:12]}"
        disk_id = new["id"].split("/providers/")[0] + f"/providers/Microsoft.Compute/disks/{disk_name}"
        os_disk.update(name=disk_name, osType="Linux", managedDisk={**(os_disk.get("managedDisk") or {}), "id": disk_id},
                       diskSizeGB=int(os_disk.get("diskSizeGB") or 30), deleteOption=os_disk.get("deleteOption", "Detach"))
        identity = None
        if (body.get("identity") or {}).get("type") == "SystemAssigned":
            identity = (found or {}).get("identity") or {"type": "SystemAssigned", "principalId": str(uuid.uuid4()),
                                                        "tenantId": TENANT}
        props = {k: v for k, v in p.items() if k not in ("instanceView", "provisioningState")}
        props.update(vmId=(found or {}).get("properties", {}).get("vmId") or str(uuid.uuid4()),
                     timeCreated=(found or {}).get("properties", {}).get("timeCreated") or _now(),
                     storageProfile={"imageReference": {**image, "exactVersion": "24.1.0"} if not image.get("id") else image,
                                     "osDisk": os_disk, "dataDisks": []},
                     osProfile={k: v for k, v in os_profile.items() if k != "adminPassword"},
                     priority=priority)
        if identity:
            new["identity"] = identity
        new["properties"] = props
        new["_power"] = (found or {}).get("_power") or "starting"
        for nic in nic_resources:  # attached at once: a failed VM still holds its NIC, as on Azure
            nic["properties"]["virtualMachine"] = {"id": new["id"]}

        def apply(err):
            if err:
                new["_power"] = "deallocated" if found is None else new["_power"]
                return
            new["_power"] = "running"
            if disk_id.lower() not in self.resources:  # the implicit OS disk: created untagged (ARM copies no tags)
                self.resources[disk_id.lower()] = {
                    "id": disk_id, "name": disk_name, "type": "Microsoft.Compute/disks", "location": new["location"],
                    "tags": {}, "_rg": new["_rg"], "managedBy": new["id"],
                    "sku": {"name": (os_disk.get("managedDisk") or {}).get("storageAccountType", "Premium_LRS")},
                    "properties": {"diskSizeGB": os_disk["diskSizeGB"], "diskState": "Attached", "osType": "Linux",
                                   "provisioningState": "Succeeded"}}

        return new, apply

    def _check_delete(self, r: dict) -> None:
        p = r["properties"]
        if r["type"] == "Microsoft.Network/networkInterfaces" and p.get("virtualMachine"):
            raise ArmError(400, "NicInUse", f"Network Interface {r['id']} is used by existing resource "
                           f"{p['virtualMachine']['id']}. In order to delete the network interface, it must be dissociated "
                           "from the resource.")
        if r["type"] == "Microsoft.Network/publicIPAddresses" and p.get("ipConfiguration"):
            raise ArmError(400, "PublicIPAddressCannotBeDeleted", f"Public IP address {r['id']} can not be deleted since it "
                           f"is still allocated to resource {p['ipConfiguration']['id']}.")
        if r["type"] == "Microsoft.Network/networkSecurityGroups" and p.get("networkInterfaces"):
            raise ArmError(400, "InUseNetworkSecurityGroupCannotBeDeleted", f"Network security group {r['id']} cannot be "
                           "deleted because it is in use by " + ", ".join(n["id"] for n in p["networkInterfaces"]))
        if r["type"] == "Microsoft.Compute/disks" and r.get("managedBy"):
            raise ArmError(409, "OperationNotAllowed", f"Disk {r['name']} is attached to VM {r['managedBy']}.")

    def _delete(self, r: dict, *, cascade: bool = True, only_disks: bool = False) -> None:
        """Remove `r` (and what ARM removes with it); releases what it held."""
        self.resources.pop(r["id"].lower(), None)
        p = r["properties"]
        if r["type"] == "Microsoft.Compute/virtualMachines":
            disk = self.resources.get(p["storageProfile"]["osDisk"]["managedDisk"]["id"].lower())
            if disk is not None:
                disk["managedBy"] = None
                disk["properties"]["diskState"] = "Unattached"
                if p["storageProfile"]["osDisk"].get("deleteOption") == "Delete" or only_disks:
                    self.resources.pop(disk["id"].lower(), None)
            for ref in p["networkProfile"]["networkInterfaces"]:
                nic = self.resources.get(ref["id"].lower())
                if nic is None:
                    continue
                nic["properties"]["virtualMachine"] = None
                if cascade and not only_disks and (ref.get("properties") or {}).get("deleteOption") == "Delete":
                    self._delete(nic)
        elif r["type"] == "Microsoft.Network/networkInterfaces":
            for c in p["ipConfigurations"]:
                ip = self.resources.get(((c["properties"].get("publicIPAddress") or {}).get("id") or "").lower())
                if ip is not None:
                    ip["properties"]["ipConfiguration"] = None
            nsg = self.resources.get(((p.get("networkSecurityGroup") or {}).get("id") or "").lower())
            if nsg is not None:
                nsg["properties"]["networkInterfaces"] = [n for n in nsg["properties"]["networkInterfaces"]
                                                          if n["id"].lower() != r["id"].lower()]

    def _action(self, method, rid, action, query):
        if action.lower() == "instanceview" and method == "GET":
            vm = self.resources.get(rid.lower())
            if vm is None:
                raise ArmError(404, "ResourceNotFound", f"{rid} not found")
            return 200, {}, _instance_view(vm)
        vm = self.resources.get(rid.lower())
        if method != "POST":
            raise ArmError(405, "MethodNotAllowed", f"{method} {action}")
        if vm is None or vm["type"] != "Microsoft.Compute/virtualMachines":
            raise ArmError(404, "ResourceNotFound", f"The Resource '{rid}' was not found.")
        name = action.lower()
        if name == "simulateeviction":
            if vm["properties"].get("priority") != "Spot":
                raise ArmError(409, "OperationNotAllowed", "Simulate eviction is only for Spot VMs.")
            self._accept(lambda err: self._evict(vm), location=vm["location"], namespace="Microsoft.Compute")
            return 204, {}, None
        moves = {"deallocate": ("deallocating", "deallocated"), "start": ("starting", "running"),
                 "poweroff": ("stopping", "stopped")}
        if name not in moves:
            raise ArmError(400, "InvalidAction", f"action {action} is not implemented by this double")
        failure = self._take_operation_failure()
        during, after = moves[name]
        vm["_power"] = during

        def apply(err):
            if vm["id"].lower() in self.resources:
                vm["_power"] = after if not err else vm["_power"]

        headers, _ = self._accept(apply, location=vm["location"], namespace="Microsoft.Compute", error=failure)
        return 202, headers, None

    def _evict(self, vm: dict) -> None:
        if vm["id"].lower() not in self.resources:
            return
        if vm["properties"].get("evictionPolicy") == "Delete":
            self._delete(vm, only_disks=True)  # "deleted together with their underlying disks"
        else:
            vm["_power"] = "deallocated"


_KINDS = {k.lower(): k for k in (
    "Microsoft.Compute/virtualMachines", "Microsoft.Compute/disks", "Microsoft.Network/networkInterfaces",
    "Microsoft.Network/publicIPAddresses", "Microsoft.Network/networkSecurityGroups", "Microsoft.Network/virtualNetworks")}


def _instance_view(vm: dict) -> dict:
    state = vm["properties"].get("provisioningState", "Succeeded")
    return {"computerName": (vm["properties"].get("osProfile") or {}).get("computerName"),
            "statuses": [{"code": f"ProvisioningState/{state.lower()}", "level": "Info", "displayStatus": state},
                         {"code": f"PowerState/{vm['_power']}", "level": "Info",
                          "displayStatus": f"VM {vm['_power']}"}]}


def _public(r: dict) -> dict:
    return json.loads(json.dumps({k: v for k, v in r.items() if not k.startswith("_") and k != "managedBy"}
                                 | ({"managedBy": r["managedBy"]} if r.get("managedBy") else {})))


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00", time.gmtime())


class ImdsIdentity:
    """The VM's Instance Metadata Service token endpoint (``GET /metadata/identity/oauth2/token`` with
    ``Metadata: true``), issuing `token`: the launching user's (`arm.admin_token`) for the client, or a
    VM identity's (`arm.token_for(principal)`) for the VM's own autostop script."""

    def __init__(self, token: str):
        self.token, self.requests = token, []
        imds = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query).items()}
                imds.requests.append(self.path)
                if parts.path != "/metadata/identity/oauth2/token":
                    return self._send(404, {"error": "not_found"})
                if self.headers.get("Metadata") != "true":
                    return self._send(400, {"error": "invalid_request", "error_description": "Required metadata header not "
                                            "specified"})
                if not query.get("resource") or not query.get("api-version"):
                    return self._send(400, {"error": "invalid_request", "error_description": "resource and api-version"})
                expires = int(time.time()) + 3599
                return self._send(200, {"access_token": imds.token, "refresh_token": "", "expires_in": "3599",
                                        "expires_on": str(expires), "not_before": str(expires - 3599),
                                        "resource": query["resource"], "token_type": "Bearer"})

            def _send(self, code, doc):
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> ImdsIdentity:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
