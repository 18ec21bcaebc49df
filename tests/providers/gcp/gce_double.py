"""A loopback double of the Compute Engine REST API (v1), only the endpoints the gcp provider calls, written
from the public reference (cloud.google.com/compute/docs/reference/rest/v1), state in memory:

    zones.list                              GET  /compute/v1/projects/P/zones
    instances.insert (requestId dedup)      POST /compute/v1/projects/P/zones/Z/instances
    instances.get / delete                  GET|DELETE .../zones/Z/instances/NAME
    instances.list / aggregatedList         GET  .../zones/Z/instances, /projects/P/aggregated/instances (filter)
    instances.start / stop                  POST .../instances/NAME/start|stop
    instances.getGuestAttributes            GET  .../instances/NAME/getGuestAttributes?queryPath=hostkeys/
    zoneOperations.get / wait / list        GET  .../zones/Z/operations/OP, POST .../OP/wait, GET .../operations
    firewalls.get / insert                  GET  /projects/P/global/firewalls/NAME, POST .../global/firewalls
    globalOperations.get / wait             GET|POST /projects/P/global/operations/OP[/wait]
    the metadata server's token             GET  /computeMetadata/v1/instance/service-accounts/default/token

Every API call must carry a bearer token: a self-signed JWT of the test's service account (verified against
its public key: what google-auth sends for a service-account key), or a token this double handed out
(the metadata server's, as a VM's own service account gets). Errors have Google's JSON error shape.
Operations finish at once, except a delete when `delete_seconds` is set: until then the VM is STOPPING, its
operation RUNNING (`wait` returns it so), and another delete of it is refused as not ready.

Test controls, each named for what it stands in for: `fail_next` (an INJECTION of an error GCE returns that
cannot be caused for real here: stockouts, quota), `preempt` (what GCE does when it reclaims a Spot VM).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_ID = itertools.count(5_000_000_000_000_000_001)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000-00:00", time.gmtime())


def _visible(doc: Any) -> Any:
    """`doc` without the double's own bookkeeping (keys starting with _), at every depth."""
    if isinstance(doc, dict):
        return {k: _visible(v) for k, v in doc.items() if not k.startswith("_")}
    if isinstance(doc, list):
        return [_visible(v) for v in doc]
    return doc


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str):
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


_TERM = re.compile(r'([A-Za-z0-9_.\-]+)\s*(:\s*\*|!=|=)\s*(?:"([^"]*)"|([^\s)]*))')


def matches(filter_text: str, resource: dict) -> bool:
    """GCE's list filter, the part the provider uses: terms ANDed (by `AND`, spaces or parentheses), each
    `labels.KEY:*` (the key is set), `FIELD = "VALUE"`, `FIELD != "VALUE"` (nested fields by dots)."""
    text = re.sub(r"\bAND\b", " ", (filter_text or "").replace("(", " ").replace(")", " "))
    if _TERM.sub("", text).strip():
        raise ApiError(400, "invalid", f"Invalid value for field 'filter': '{filter_text}'")
    for m in _TERM.finditer(text):
        path, op = m.group(1), m.group(2).replace(" ", "")
        value = m.group(3) if m.group(3) is not None else m.group(4)
        node: Any = resource
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if op == ":*":
            ok = node is not None
        else:
            ok = node is not None and str(node) == value
            ok = (not ok) if op == "!=" else ok
        if not ok:
            return False
    return True


class GCEDouble:
    def __init__(self, project: str, zones: list[str], *, public_keys: list[str] | None = None):
        self.project, self.zones = project, list(zones)
        self.public_keys = list(public_keys or [])  # PEM public keys whose self-signed JWTs are accepted
        self.tokens: set[str] = set()  # bearer tokens this double handed out (metadata server)
        self.instances: dict[tuple[str, str], dict] = {}  # (zone, name) -> instance
        self.operations: dict[str, dict] = {}  # name -> operation (zonal and global)
        self.firewalls: dict[str, dict] = {}
        self.requests: list[tuple[str, str, dict | None]] = []  # (method, path, body)
        self.host_key: str | None = None  # "ssh-ed25519 AAAA..." served as every instance's guest attribute
        self.delete_seconds = 0.0  # a delete takes this long (its operation RUNNING, the VM STOPPING)
        self._failures: list[dict] = []
        self._request_ids: dict[str, str] = {}
        self._lock = threading.RLock()
        self._ips = itertools.count(10)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="gce-double", daemon=True)

    # -- test controls -----------------------------------------------------------------------------------
    def start(self) -> GCEDouble:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset(self) -> None:
        """Forget every resource, operation, request and injected failure (one double serves a session)."""
        with self._lock:
            for store in (self.instances, self.operations, self.firewalls, self._request_ids):
                store.clear()
            self.requests.clear()
            self._failures.clear()
            self.delete_seconds = 0.0

    def fail_next(self, method: str, kind: str, code: str, message: str, *, http: int | None = None,
                  times: int = 1) -> None:
        """INJECTION: the next `times` `method` calls on `kind` (e.g. POST "instances") fail with `code`:
        in the operation's error (as GCE reports stockouts and most quota errors), or as an HTTP error
        with status `http` (as it reports refused permissions and some quota checks)."""
        with self._lock:
            self._failures.append({"method": method, "kind": kind, "code": code, "message": message,
                                   "http": http, "left": times})

    def preempt(self, name: str) -> dict:
        """What GCE does when it reclaims a Spot VM: a `compute.instances.preempted` operation, then the VM
        stops (TERMINATED) or is deleted, as its `instanceTerminationAction` says."""
        with self._lock:
            zone, inst = next((k[0], v) for k, v in self.instances.items() if k[1] == name)
            op = self._operation(zone, "compute.instances.preempted", inst, user="system")
            if (inst.get("scheduling") or {}).get("instanceTerminationAction") == "STOP":
                inst["status"] = "TERMINATED"
            else:
                del self.instances[(zone, name)]
            return op

    def live(self) -> list[dict]:
        with self._lock:
            return list(self.instances.values())

    # -- resources -----------------------------------------------------------------------------------------
    def _base(self) -> str:
        return f"{self.url}/compute/v1/projects/{self.project}"

    def _operation(self, zone: str | None, op_type: str, target: dict | None, *, user: str = "launchpad@test",
                   error: dict | None = None, running: float = 0) -> dict:
        name = f"operation-{int(time.time() * 1000)}-{next(_ID)}"
        where = f"{self._base()}/zones/{zone}" if zone else f"{self._base()}/global"
        op = {"kind": "compute#operation", "id": str(next(_ID)), "name": name, "operationType": op_type,
              "status": "RUNNING" if running else "DONE", "progress": 0 if running else 100,
              "insertTime": _now(), "startTime": _now(), "user": user, "selfLink": f"{where}/operations/{name}",
              "targetLink": (target or {}).get("selfLink", "")}
        if target and target.get("id"):
            op["targetId"] = target["id"]
        if zone:
            op["zone"] = f"{self._base()}/zones/{zone}"
        if not running:
            op["endTime"] = _now()
        if error:
            op["error"] = {"errors": [error]}
            op["httpErrorStatusCode"], op["httpErrorMessage"] = 400, "BAD REQUEST"
        op["_done_at"] = time.monotonic() + running if running else 0
        self.operations[name] = op
        return op

    def _failure(self, method: str, kind: str) -> dict | None:
        for f in self._failures:
            if f["method"] == method and f["kind"] == kind and f["left"] > 0:
                f["left"] -= 1
                return f
        return None

    def _insert(self, zone: str, body: dict, request_id: str | None) -> dict:
        if request_id and request_id in self._request_ids:  # the same request again: the same operation
            return self.operations[self._request_ids[request_id]]
        if zone not in self.zones:
            raise ApiError(404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}' was not found")
        name = body.get("name") or ""
        if not re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", name):
            raise ApiError(400, "invalid", f"Invalid value for field 'resource.name': '{name}'. Must be a match of "
                           "regex '(?:[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?)'")
        for key, value in (body.get("labels") or {}).items():
            if not re.fullmatch(r"[a-z][a-z0-9_-]{0,62}", key) or not re.fullmatch(r"[a-z0-9_-]{0,63}", value):
                raise ApiError(400, "invalid", f"Invalid value for field 'resource.labels': '{key}={value}'")
        failure = self._failure("POST", "instances")
        if failure and failure["http"]:
            raise ApiError(failure["http"], failure["code"], failure["message"])
        if failure:
            op = self._operation(zone, "insert", {"selfLink": f"{self._base()}/zones/{zone}/instances/{name}"},
                                 error={"code": failure["code"], "message": failure["message"]})
        elif (zone, name) in self.instances:
            raise ApiError(409, "alreadyExists",
                           f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' already exists")
        else:
            n = next(self._ips)
            inst = {**body, "kind": "compute#instance", "id": str(next(_ID)), "status": "RUNNING",
                    "zone": f"{self._base()}/zones/{zone}", "creationTimestamp": _now(), "lastStartTimestamp": _now(),
                    "selfLink": f"{self._base()}/zones/{zone}/instances/{name}",
                    "machineType": body.get("machineType", ""),
                    "metadata": {**(body.get("metadata") or {}), "fingerprint": "fp-1", "kind": "compute#metadata"}}
            nics = []
            for i, nic in enumerate(body.get("networkInterfaces") or [{}]):
                nic = {**nic, "name": f"nic{i}", "networkIP": f"10.128.0.{n}"}
                nic["accessConfigs"] = [{**ac, "natIP": f"34.118.{n // 250}.{n % 250 + 1}"}
                                        for ac in nic.get("accessConfigs") or []]
                nics.append(nic)
            inst["networkInterfaces"] = nics
            inst["disks"] = [{**d, "index": i, "deviceName": d.get("deviceName") or f"persistent-disk-{i}",
                              "source": f"{self._base()}/zones/{zone}/disks/{name}" if d.get("boot") else None}
                             for i, d in enumerate(body.get("disks") or [])]
            self.instances[(zone, name)] = inst
            op = self._operation(zone, "insert", inst)
        if request_id:
            self._request_ids[request_id] = op["name"]
        return op

    def _get(self, zone: str, name: str) -> dict:
        inst = self.instances.get((zone, name))
        if inst is None:
            raise ApiError(404, "notFound", f"The resource 'projects/{self.project}/zones/{zone}/instances/{name}' "
                           "was not found")
        return inst

    def _poll(self, op: dict) -> dict:
        if op.get("_done_at") and time.monotonic() >= op["_done_at"]:
            op.update(status="DONE", progress=100, endTime=_now(), _done_at=0)
            if op["operationType"] == "delete":
                self.instances.pop(op["_target"], None)
        return op

    def _settle(self) -> None:
        """Finish the deletes whose time has come (GCE goes on whether anybody looks or not)."""
        for op in list(self.operations.values()):
            self._poll(op)

    def _call(self, method: str, path: str, query: dict[str, str], body: dict | None) -> dict:
        parts = path.strip("/").split("/")
        if parts[:3] != ["compute", "v1", "projects"] or len(parts) < 5 or parts[3] != self.project:
            raise ApiError(404, "notFound", f"The resource '{path}' was not found")
        rest = parts[4:]
        with self._lock:
            self._settle()
            if rest == ["zones"] and method == "GET":
                items = [{"kind": "compute#zone", "name": z, "status": "UP", "selfLink": f"{self._base()}/zones/{z}",
                          "region": f"{self._base()}/regions/{z.rsplit('-', 1)[0]}"} for z in self.zones]
                return {"kind": "compute#zoneList", "items": items}
            if rest == ["aggregated", "instances"] and method == "GET":
                scoped: dict[str, Any] = {}
                for (zone, _), inst in sorted(self.instances.items()):
                    if matches(query.get("filter", ""), inst):
                        scoped.setdefault(f"zones/{zone}", {"instances": []})["instances"].append(inst)
                return {"kind": "compute#instanceAggregatedList", "items": scoped}
            if rest[:1] == ["global"]:
                return self._global(method, rest[1:], body)
            if rest[:1] != ["zones"] or len(rest) < 3:
                raise ApiError(404, "notFound", f"The resource '{path}' was not found")
            zone, kind, tail = rest[1], rest[2], rest[3:]
            if kind == "operations":
                if not tail and method == "GET":
                    ops = [o for o in self.operations.values() if o.get("zone", "").endswith(f"/zones/{zone}")
                           and matches(query.get("filter", ""), o)]
                    return {"kind": "compute#operationList", "items": ops}
                op = self.operations.get(tail[0])
                if op is None:
                    raise ApiError(404, "notFound", f"The resource 'operations/{tail[0]}' was not found")
                return self._poll(op)
            if kind != "instances":
                raise ApiError(404, "notFound", f"The resource '{path}' was not found")
            if not tail:
                if method == "POST":
                    return self._insert(zone, body or {}, query.get("requestId"))
                items = [i for (z, _), i in sorted(self.instances.items())
                         if z == zone and matches(query.get("filter", ""), i)]
                return {"kind": "compute#instanceList", "items": items}
            name = tail[0]
            if len(tail) == 1 and method == "GET":
                return self._get(zone, name)
            if len(tail) == 1 and method == "DELETE":
                inst = self._get(zone, name)
                if inst.get("_deleting"):
                    raise ApiError(400, "resourceNotReady", f"The resource 'projects/{self.project}/zones/{zone}/"
                                   f"instances/{name}' is not ready")
                if self.delete_seconds:
                    inst.update(status="STOPPING", _deleting=True)
                    op = self._operation(zone, "delete", inst, running=self.delete_seconds)
                    op["_target"] = (zone, name)
                    return op
                del self.instances[(zone, name)]
                return self._operation(zone, "delete", inst)
            action = tail[1] if len(tail) == 2 else ""
            inst = self._get(zone, name)
            if action == "stop" and method == "POST":
                inst["status"] = "TERMINATED"
                return self._operation(zone, "stop", inst)
            if action == "start" and method == "POST":
                failure = self._failure("POST", "start")
                if failure:
                    return self._operation(zone, "start", inst, error={"code": failure["code"],
                                                                        "message": failure["message"]})
                inst.update(status="RUNNING", lastStartTimestamp=_now())
                return self._operation(zone, "start", inst)
            if action == "getGuestAttributes" and method == "GET":
                items = []
                if self.host_key and query.get("queryPath") == "hostkeys/":
                    kind_, key = self.host_key.split()[:2]
                    items = [{"namespace": "hostkeys", "key": kind_, "value": key}]
                return {"kind": "compute#guestAttributes", "queryPath": query.get("queryPath", ""),
                        "queryValue": {"items": items}}
            raise ApiError(404, "notFound", f"The resource '{path}' was not found")

    def _global(self, method: str, rest: list[str], body: dict | None) -> dict:
        if rest[:1] == ["operations"] and len(rest) >= 2:
            op = self.operations.get(rest[1])
            if op is None:
                raise ApiError(404, "notFound", f"The resource 'operations/{rest[1]}' was not found")
            return self._poll(op)
        if rest[:1] == ["firewalls"]:
            if method == "POST":
                name = (body or {}).get("name", "")
                if name in self.firewalls:
                    raise ApiError(409, "alreadyExists", f"The resource 'projects/{self.project}/global/firewalls/"
                                   f"{name}' already exists")
                rule = {**(body or {}), "kind": "compute#firewall", "id": str(next(_ID)),
                        "selfLink": f"{self._base()}/global/firewalls/{name}"}
                self.firewalls[name] = rule
                return self._operation(None, "insert", rule)
            if len(rest) == 2 and rest[1] in self.firewalls:
                return self.firewalls[rest[1]]
            raise ApiError(404, "notFound", f"The resource 'projects/{self.project}/global/firewalls/"
                           f"{rest[1] if len(rest) > 1 else ''}' was not found")
        raise ApiError(404, "notFound", "The resource was not found")

    # -- auth ----------------------------------------------------------------------------------------------
    def _authorised(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        token = header[len("Bearer "):]
        if token in self.tokens:
            return True
        from google.auth import jwt

        for pem in self.public_keys:
            try:
                jwt.decode(token, certs=pem, verify=True)
                return True
            except ValueError:
                continue
        return False

    def _handler(self):
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status: int, doc: dict | str, ctype: str = "application/json") -> None:
                data = (json.dumps(_visible(doc)) if ctype == "application/json" else str(doc)).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _serve(self, method: str) -> None:
                url = urllib.parse.urlsplit(self.path)
                query = dict(urllib.parse.parse_qsl(url.query))
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw.strip() else None
                if url.path.startswith("/computeMetadata/v1/"):
                    return self._metadata(url.path)
                double.requests.append((method, url.path, body))
                if not double._authorised(self.headers.get("Authorization")):
                    return self._error(ApiError(401, "authError", "Request is missing required authentication "
                                                "credential. Expected OAuth 2 access token."))
                try:
                    self._send(200, double._call(method, url.path.removesuffix("/wait"), query, body))
                except ApiError as e:
                    self._error(e)
                except Exception as e:  # a bug of the double: say it, as a 500, rather than drop the connection
                    self._error(ApiError(500, "backendError", f"double: {type(e).__name__}: {e}"))

            def _metadata(self, path: str) -> None:
                if self.headers.get("Metadata-Flavor") != "Google":
                    return self._send(403, "Missing Metadata-Flavor:Google header.", "text/plain")
                if path == "/computeMetadata/v1/instance/service-accounts/default/token":
                    token = f"ya29.metadata-{next(_ID)}"
                    double.tokens.add(token)
                    return self._send(200, {"access_token": token, "expires_in": 3599, "token_type": "Bearer"})
                if path == "/computeMetadata/v1/project/project-id":
                    return self._send(200, double.project, "text/plain")
                return self._send(404, "Not Found", "text/plain")

            def _error(self, e: ApiError) -> None:
                status = {401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND", 409: "ALREADY_EXISTS",
                          429: "RESOURCE_EXHAUSTED"}.get(e.status, "INVALID_ARGUMENT" if e.status < 500 else "UNAVAILABLE")
                self._send(e.status, {"error": {"code": e.status, "message": e.message, "status": status,
                                                "errors": [{"message": e.message, "domain": "global", "reason": e.reason}]}})

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

            def do_DELETE(self):
                self._serve("DELETE")

        return Handler
