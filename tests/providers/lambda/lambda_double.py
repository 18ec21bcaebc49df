"""A loopback double of the Lambda Cloud API (v1), only the endpoints the lambda provider calls, written from
the public reference (docs-api.lambda.ai/api/cloud, "Lambda Cloud API" 1.x), state in memory:

    listInstanceTypes    GET  /api/v1/instance-types            types with price, specs, regions with capacity
    listInstances        GET  /api/v1/instances                 the account's instances (terminated ones drop out)
    getInstance          GET  /api/v1/instances/{id}
    launchInstance       POST /api/v1/instance-operations/launch     {region_name, instance_type_name, ...}
    terminateInstance    POST /api/v1/instance-operations/terminate  {instance_ids}
    listSSHKeys / addSSHKey  GET|POST /api/v1/ssh-keys

Every call must carry the account's API key, as a bearer token or as HTTP basic's user name (both are
documented). Answers are ``{"data": ...}``; errors ``{"error": {"code", "message", "suggestion"}}`` with the
documented codes. A launch is refused with insufficient-capacity where the type's region has no capacity
(`capacity`); an instance boots for `boot_seconds` (status booting, no IP), then is active; a terminate
leaves it `terminating` for `terminate_seconds`, then it is gone.

Test controls, each named for what it stands in for: `fail_next` (an INJECTION of an answer Lambda gives that
cannot be caused for real here: a sold-out race, quota, throttling, 5xx), `host_failure` (what Lambda does
when an instance's host dies under it: the instance is terminated).
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# A few instance types as the API describes them (prices and specs as Lambda lists them).
TYPES: dict[str, dict[str, Any]] = {
    "cpu_4x_generalx": {"description": "4x CPU General Purpose", "gpu_description": "", "price_cents_per_hour": 20,
                        "specs": {"vcpus": 4, "memory_gib": 16, "storage_gib": 100, "gpus": 0}},
    "gpu_1x_a10": {"description": "1x A10 (24 GB PCIe)", "gpu_description": "A10 (24 GB PCIe)",
                   "price_cents_per_hour": 129, "specs": {"vcpus": 30, "memory_gib": 200, "storage_gib": 1400, "gpus": 1}},
    "gpu_1x_a100_sxm4": {"description": "1x A100 (40 GB SXM4)", "gpu_description": "A100 (40 GB SXM4)",
                         "price_cents_per_hour": 199, "specs": {"vcpus": 30, "memory_gib": 200, "storage_gib": 512,
                                                                "gpus": 1}},
    "gpu_1x_h100_pcie": {"description": "1x H100 (80 GB PCIe)", "gpu_description": "H100 (80 GB PCIe)",
                         "price_cents_per_hour": 329, "specs": {"vcpus": 26, "memory_gib": 200, "storage_gib": 1024,
                                                                "gpus": 1}},
    "gpu_2x_a6000": {"description": "2x RTX A6000 (48 GB)", "gpu_description": "RTX A6000 (48 GB)",
                     "price_cents_per_hour": 218, "specs": {"vcpus": 28, "memory_gib": 200, "storage_gib": 1024, "gpus": 2}},
    "gpu_8x_h100_sxm5": {"description": "8x H100 (80 GB SXM5)", "gpu_description": "H100 (80 GB SXM5)",
                         "price_cents_per_hour": 3192, "specs": {"vcpus": 208, "memory_gib": 1800, "storage_gib": 24780,
                                                                 "gpus": 8}},
}
REGIONS = {"us-east-1": "Virginia, USA", "us-west-1": "California, USA", "us-west-3": "Utah, USA",
           "europe-central-1": "Germany"}
# Where each type has capacity now (the 8x H100 is sold out everywhere)
CAPACITY = {"cpu_4x_generalx": ["us-east-1"], "gpu_1x_a10": ["us-east-1", "us-west-1"],
            "gpu_1x_a100_sxm4": ["us-west-1"], "gpu_1x_h100_pcie": ["us-west-3"],
            "gpu_2x_a6000": ["europe-central-1"], "gpu_8x_h100_sxm5": []}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, suggestion: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.suggestion = status, code, message, suggestion


class LambdaDouble:
    def __init__(self, api_key: str):
        self.api_key = api_key
        self.capacity = copy.deepcopy(CAPACITY)
        self.instances: dict[str, dict] = {}  # id -> instance (with _bookkeeping keys)
        self.ssh_keys: list[dict] = []
        self.requests: list[tuple[str, str, dict | None]] = []  # (method, path, body)
        self.boot_seconds = 0.0
        self.terminate_seconds = 0.0
        self._failures: list[dict] = []
        self._lock = threading.RLock()
        self._ips = itertools.count(10)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, name="lambda-double", daemon=True)

    # -- test controls -----------------------------------------------------------------------------------
    def start(self) -> LambdaDouble:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.instances.clear()
            self.ssh_keys.clear()
            self.requests.clear()
            self._failures.clear()
            self.capacity = copy.deepcopy(CAPACITY)
            self.boot_seconds = self.terminate_seconds = 0.0

    def fail_next(self, method: str, path: str, status: int, code: str, message: str, *, times: int = 1,
                  suggestion: str | None = None, after: bool = False) -> None:
        """INJECTION: the next `times` requests `method` whose path ends with `path` get this error answer;
        with `after`, the request is carried out first (an answer lost on the way back, e.g. a 502 from a proxy)."""
        with self._lock:
            self._failures.append({"method": method, "path": path, "status": status, "code": code, "after": after,
                                   "message": message, "suggestion": suggestion, "left": times})

    def host_failure(self, instance_id: str) -> None:
        """What Lambda does when the host under an instance dies: the instance is terminated and gone."""
        with self._lock:
            self.instances[instance_id]["status"] = "terminated"

    def live(self) -> list[dict]:
        """Instances that bill: everything not terminated."""
        with self._lock:
            self._tick()
            return [_visible(i) for i in self.instances.values() if i["status"] != "terminated"]

    def launches(self) -> list[dict]:
        return [b for m, p, b in self.requests if m == "POST" and p.endswith("/instance-operations/launch") and b]

    # -- the API -------------------------------------------------------------------------------------------
    def _tick(self) -> None:
        now = time.monotonic()
        for inst in self.instances.values():
            if inst["status"] == "booting" and now >= inst["_active_at"]:
                inst.update(status="active", ip=inst["_ip"], private_ip=inst["_private"], hostname=inst["_ip"])
            if inst["status"] == "terminating" and now >= inst["_gone_at"]:
                inst["status"] = "terminated"

    def _instance(self, instance_id: str) -> dict:
        inst = self.instances.get(instance_id)
        if inst is None or inst["status"] == "terminated":
            raise ApiError(404, "global/object-does-not-exist", "Specified instance does not exist.")
        return inst

    def _types(self) -> dict:
        return {name: {"instance_type": {"name": name, **spec},
                       "regions_with_capacity_available": [{"name": r, "description": REGIONS[r]}
                                                           for r in self.capacity.get(name, [])]}
                for name, spec in TYPES.items()}

    def _launch(self, body: dict) -> dict:
        for field in ("region_name", "instance_type_name", "ssh_key_names"):
            if field not in body:
                raise ApiError(400, "global/invalid-parameters", f"Missing required field: {field}")
        region, itype, keys = body["region_name"], body["instance_type_name"], body["ssh_key_names"]
        if itype not in TYPES:
            raise ApiError(404, "global/object-does-not-exist", f"Instance type {itype!r} does not exist.",
                           "List the instance types with GET /instance-types.")
        if region not in REGIONS:
            raise ApiError(400, "global/invalid-parameters", f"Invalid region: {region}")
        if not isinstance(keys, list) or len(keys) != 1:
            raise ApiError(400, "global/invalid-parameters", "Exactly one SSH key must be specified.")
        if keys[0] not in {k["name"] for k in self.ssh_keys}:
            raise ApiError(404, "global/object-does-not-exist", f"SSH key {keys[0]!r} does not exist.",
                           "Add it with POST /ssh-keys.")
        name = body.get("name") or ""
        if len(name) > 64:
            raise ApiError(400, "global/invalid-parameters", "name: must be 64 characters or fewer")
        for tag in body.get("tags") or []:
            if len(tag.get("key", "")) > 55 or len(str(tag.get("value", ""))) > 128:
                raise ApiError(400, "global/invalid-parameters", "tags: key or value too long")
        if region not in self.capacity.get(itype, []):
            raise ApiError(400, "instance-operations/launch/insufficient-capacity",
                           "Not enough capacity to fulfill launch request.")
        ids = []
        for _ in range(int(body.get("quantity") or 1)):
            n = next(self._ips)
            iid = uuid.uuid4().hex
            self.instances[iid] = {
                "id": iid, "name": name, "status": "booting", "ssh_key_names": list(keys), "file_system_names": [],
                "region": {"name": region, "description": REGIONS[region]},
                "instance_type": {"name": itype, **TYPES[itype]}, "tags": list(body.get("tags") or []),
                "actions": {a: {"available": True} for a in ("migrate", "rebuild", "restart", "cold_reboot", "terminate")},
                "_ip": f"198.51.100.{n}", "_private": f"10.0.{n // 250}.{n % 250}",
                "_active_at": time.monotonic() + self.boot_seconds}
            ids.append(iid)
        self._tick()
        return {"instance_ids": ids}

    def _terminate(self, body: dict) -> dict:
        ids = body.get("instance_ids")
        if not isinstance(ids, list) or not ids:
            raise ApiError(400, "global/invalid-parameters", "instance_ids: must be a non-empty list")
        found = [self._instance(i) for i in ids]  # one unknown id fails the whole request
        for inst in found:
            if inst["status"] != "terminating":
                inst.update(status="terminating", _gone_at=time.monotonic() + self.terminate_seconds)
        self._tick()
        return {"terminated_instances": [_visible(i) for i in found]}

    def _add_key(self, body: dict) -> dict:
        name, public = body.get("name"), body.get("public_key")
        if not name:
            raise ApiError(400, "global/invalid-parameters", "name: required")
        if any(k["name"] == name for k in self.ssh_keys):
            raise ApiError(400, "global/invalid-parameters", f"SSH key with name {name!r} already exists")
        key = {"id": uuid.uuid4().hex, "name": name, "public_key": public}
        self.ssh_keys.append(key)
        return key

    def dispatch(self, method: str, path: str, body: dict | None) -> Any:
        with self._lock:
            self._tick()
            for f in self._failures:
                if f["left"] > 0 and f["method"] == method and path.endswith(f["path"]):
                    f["left"] -= 1
                    if f["after"]:
                        self._route(method, path, body)
                    raise ApiError(f["status"], f["code"], f["message"], f["suggestion"])
            return self._route(method, path, body)

    def _route(self, method: str, path: str, body: dict | None) -> Any:
        with self._lock:
            route = path.removeprefix("/api/v1")
            if method == "GET" and route == "/instance-types":
                return self._types()
            if method == "GET" and route == "/instances":
                return [_visible(i) for i in self.instances.values() if i["status"] != "terminated"]
            if method == "GET" and route.startswith("/instances/"):
                return _visible(self._instance(route.rsplit("/", 1)[1]))
            if method == "POST" and route == "/instance-operations/launch":
                return self._launch(body or {})
            if method == "POST" and route == "/instance-operations/terminate":
                return self._terminate(body or {})
            if route == "/ssh-keys":
                return list(self.ssh_keys) if method == "GET" else self._add_key(body or {})
            raise ApiError(404, "global/not-found", f"No route for {method} {path}")

    def _authorised(self, header: str | None) -> bool:
        if not header:
            return False
        kind, _, value = header.partition(" ")
        if kind == "Bearer":
            return value == self.api_key
        if kind == "Basic":
            user = base64.b64decode(value).decode(errors="replace").partition(":")[0]
            return user == self.api_key
        return False

    def _handler(self):
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _answer(self, status: int, doc: dict) -> None:
                raw = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                path = self.path.split("?", 1)[0]
                with double._lock:
                    double.requests.append((method, path, body))
                try:
                    if not double._authorised(self.headers.get("Authorization")):
                        raise ApiError(401, "global/invalid-api-key", "API key was invalid, expired, or deleted.",
                                       "Check your API key or create a new one, then try again.")
                    self._answer(200, {"data": double.dispatch(method, path, body)})
                except ApiError as e:
                    err = {"code": e.code, "message": e.message}
                    if e.suggestion:
                        err["suggestion"] = e.suggestion
                    self._answer(e.status, {"error": err})

            def do_GET(self):
                self._serve("GET")

            def do_POST(self):
                self._serve("POST")

        return Handler


def _visible(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if not k.startswith("_")}
