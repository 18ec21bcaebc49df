"""A loopback double of RunPod's GraphQL API (POST /graphql), only the operations launchpad and the runpod SDK
send, written from RunPod's GraphQL reference (docs.runpod.io/sdks/graphql/manage-pods, graphql-spec.runpod.io),
state in memory:

    query  myself { id pubKey pods { ... } }            the account and its pods
    query  pod(input: {podId})                          one pod, null when there is none
    query  gpuTypes[(input: {id})] { ... }              GPU types with secure/community and spot prices
    mutation podFindAndDeployOnDemand(input: {...})     rent an on-demand pod (podType RESERVED)
    mutation podRentInterruptable(input: {bidPerGpu})   rent an interruptible pod (podType INTERRUPTABLE)
    mutation podStop / podResume / podBidResume / podTerminate (input: {podId ...})

Requests must carry ``Authorization: Bearer <api_key>``; anything else is HTTP 401, as RunPod answers a bad
key. Answers are projected onto the selection set asked for; errors have GraphQL's shape
(``{"errors": [{"message", "path"}], "data": null}``) with RunPod's messages. A running pod's
``runtime.ports`` map its port 22 to `ssh` (the loopback sshd that plays every pod), after `boot_polls` reads
of the pod (the image being pulled). `supportPublicIp: false` leaves only the private mapping.

Test controls, each named for what it stands in for: `sold_out` (GPU types RunPod has no free GPUs of: the
SDK's "no longer any instances available" error), `fail_next` (an INJECTION of an error RunPod returns that
cannot be caused for real here), `preempt` (what RunPod does when it reclaims an interruptible pod: it stops it).
"""

from __future__ import annotations

import itertools
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from graphql_lite import Field, GraphQLSyntaxError, parse, project

SOLD_OUT = "There are no longer any instances available with the requested specifications. Please refresh and try again."
NO_HOST_GPUS = "There are not enough free GPUs on the host machine to start this pod."

# id, memory, secure price, community price, secure spot, community spot, host CUDA, max GPUs (per GPU-hour, USD)
GPU_TYPES = [
    ("NVIDIA GeForce RTX 4090", 24, 0.69, 0.34, 0.35, 0.20, "12.8", 8),
    ("NVIDIA RTX A6000", 48, 0.79, 0.49, 0.40, 0.25, "12.4", 8),
    ("NVIDIA A100 80GB PCIe", 80, 1.64, 1.19, 0.82, 0.60, "12.8", 8),
    ("NVIDIA H100 80GB HBM3", 80, 2.99, None, 1.50, None, "12.9", 8),
    ("NVIDIA RTX 6000 Ada Generation", 48, 0.77, 0.74, 0.39, 0.37, "12.8", 4),
]


class QueryError(Exception):
    pass


def _gpu_type(row: tuple) -> dict[str, Any]:
    gid, mem, sp, cp, ssp, csp, cuda, most = row
    return {"id": gid, "displayName": gid.replace("NVIDIA ", "").replace("GeForce ", ""), "manufacturer": "Nvidia",
            "memoryInGb": mem, "secureCloud": sp is not None, "communityCloud": cp is not None, "securePrice": sp,
            "communityPrice": cp, "secureSpotPrice": ssp, "communitySpotPrice": csp, "maxGpuCount": most,
            "maxGpuCountSecureCloud": most if sp else 0, "maxGpuCountCommunityCloud": most if cp else 0,
            "lowestPrice": lambda args, sp=sp, cp=cp, ssp=ssp: {"minimumBidPrice": ssp,
                                                                 "uninterruptablePrice": sp or cp},
            "_cuda": cuda}


class RunPodDouble:
    def __init__(self, api_key: str = "rp_test_key_0123456789"):
        self.api_key = api_key
        self.gpu_types = [_gpu_type(r) for r in GPU_TYPES]
        self.pods: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, dict[str, Any]]] = []  # (operation field, its arguments)
        self.ssh: tuple[str, int] = ("127.0.0.1", 22)  # where every pod's port 22 is mapped
        self.boot_polls = 0  # reads of a new pod before its runtime (ports) appears
        self.sold_out: set[str] = set()  # GPU type ids with no free GPUs
        self._failures: list[dict[str, Any]] = []
        self._lock = threading.RLock()
        self._ips = itertools.count(10)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="runpod-double", daemon=True)

    # -- test controls -----------------------------------------------------------------------------------
    def start(self) -> RunPodDouble:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.pods.clear()
            self.requests.clear()
            self._failures.clear()
            self.sold_out.clear()
            self.boot_polls = 0

    def fail_next(self, operation: str, message: str, *, times: int = 1, after: bool = False) -> None:
        """INJECTION: the next `times` calls of `operation` (a top-level field, e.g. "podFindAndDeployOnDemand")
        answer with a GraphQL error `message`; with `after`, the call takes effect first and only its answer
        is lost (a dropped response)."""
        with self._lock:
            self._failures.append({"op": operation, "message": message, "left": times, "after": after})

    def preempt(self, pod_id: str) -> None:
        """What RunPod does when it reclaims an interruptible pod: the pod is stopped (its GPU taken, its volume
        kept) and its container killed."""
        with self._lock:
            pod = self.pods[pod_id]
            assert pod["podType"] == "INTERRUPTABLE", "only interruptible pods are reclaimed"
            pod.update(desiredStatus="EXITED", runtime=None, lastStatusChange=f"Exited by Runpod: {time.ctime()}")

    def failures_left(self, operation: str) -> int:
        """How many injected failures of `operation` have not been answered yet."""
        with self._lock:
            return sum(x["left"] for x in self._failures if x["op"] == operation)

    def live(self) -> list[dict[str, Any]]:
        """Pods that exist (running or stopped): what still bills."""
        with self._lock:
            return [p for p in self.pods.values() if p["desiredStatus"] != "TERMINATED"]

    def calls(self, operation: str) -> list[dict[str, Any]]:
        return [args for op, args in self.requests if op == operation]

    # -- resolvers ---------------------------------------------------------------------------------------
    def _visible(self, pod: dict[str, Any]) -> dict[str, Any]:
        if pod["desiredStatus"] == "RUNNING" and pod["runtime"] is None:
            if pod["_boot_left"] > 0:
                pod["_boot_left"] -= 1
            else:
                ports = [{"ip": f"100.65.0.{pod['_ip']}", "isIpPublic": False, "privatePort": 22, "publicPort": 22,
                          "type": "tcp"}]
                if pod["_public"]:
                    ports.append({"ip": self.ssh[0], "isIpPublic": True, "privatePort": 22, "publicPort": self.ssh[1],
                                  "type": "tcp"})
                pod["runtime"] = {"ports": ports, "uptimeInSeconds": 0, "gpus": [{"id": "GPU-0"}]}
        return {k: v for k, v in pod.items() if not k.startswith("_")}

    def _pod(self, pod_id: str, message: str = "pod not found") -> dict[str, Any]:
        pod = self.pods.get(pod_id)
        if pod is None or pod["desiredStatus"] == "TERMINATED":
            raise QueryError(message)
        return pod

    def _deploy(self, inp: dict[str, Any], interruptible: bool) -> dict[str, Any]:
        gtype = next((t for t in self.gpu_types if t["id"] == inp.get("gpuTypeId")), None)
        if gtype is None:
            raise QueryError(f"Invalid GPU type {inp.get('gpuTypeId')!r}")
        cloud = str(inp.get("cloudType") or "ALL").lower()
        clouds = ["secure", "community"] if cloud == "all" else [cloud]
        prices = [(c, gtype[f"{c}SpotPrice" if interruptible else f"{c}Price"]) for c in clouds
                  if gtype[f"{c}Price"] is not None]
        allowed = inp.get("allowedCudaVersions")
        if not prices or gtype["id"] in self.sold_out or (allowed and gtype["_cuda"] not in allowed):
            raise QueryError(SOLD_OUT)
        cloud, price = prices[0]
        if interruptible and float(inp.get("bidPerGpu") or 0) < float(price):
            raise QueryError(f"Your bid price is below the minimum bid price of {price}/hr.")
        count = int(inp.get("gpuCount") or 1)
        pod_id = secrets.token_hex(7)[:14]
        env = [f"{e['key']}={e['value']}" for e in inp.get("env") or []]
        pod = {
            "id": pod_id, "name": inp.get("name") or "", "imageName": inp.get("imageName"), "env": env,
            "gpuCount": count, "desiredStatus": "RUNNING", "podType": "INTERRUPTABLE" if interruptible else "RESERVED",
            "costPerHr": round((float(inp["bidPerGpu"]) if interruptible else float(price)) * count, 4),
            "containerDiskInGb": inp.get("containerDiskInGb"), "volumeInGb": inp.get("volumeInGb") or 0,
            "volumeMountPath": inp.get("volumeMountPath"), "ports": inp.get("ports"), "dockerArgs": inp.get("dockerArgs"),
            "machineId": f"m{pod_id[:6]}", "machine": {"podHostId": f"{pod_id}-64410f", "gpuDisplayName": gtype["displayName"]},
            "memoryInGb": inp.get("minMemoryInGb") or 31, "vcpuCount": inp.get("minVcpuCount") or 8, "uptimeSeconds": 0,
            "lastStatusChange": f"Rented by User: {time.ctime()}", "runtime": None,
            "_cloud": cloud, "_boot_left": self.boot_polls, "_ip": next(self._ips), "_gpu": gtype["id"],
            "_public": bool(inp.get("supportPublicIp", True)) and "22/tcp" in str(inp.get("ports") or ""),
        }
        self.pods[pod_id] = pod
        return self._visible(pod)

    def _resolve(self, f: Field) -> Any:
        inp = f.args.get("input") or {}
        if f.name == "myself":
            return {"id": "user_launchpad_test", "pubKey": "", "networkVolumes": [],
                    "pods": [self._visible(p) for p in self.pods.values() if p["desiredStatus"] != "TERMINATED"]}
        if f.name == "pod":
            pod = self.pods.get(str(inp.get("podId")))
            return self._visible(pod) if pod and pod["desiredStatus"] != "TERMINATED" else None
        if f.name == "gpuTypes":
            return [t for t in self.gpu_types if not inp.get("id") or t["id"] == inp["id"]]
        if f.name in ("podFindAndDeployOnDemand", "podRentInterruptable"):
            return self._deploy(inp, f.name == "podRentInterruptable")
        if f.name == "podStop":
            pod = self._pod(str(inp.get("podId")))
            pod.update(desiredStatus="EXITED", runtime=None, lastStatusChange=f"Exited by User: {time.ctime()}")
            return self._visible(pod)
        if f.name in ("podResume", "podBidResume"):
            pod = self._pod(str(inp.get("podId")))
            if pod["_gpu"] in self.sold_out:
                raise QueryError(NO_HOST_GPUS)
            pod.update(desiredStatus="RUNNING", _boot_left=self.boot_polls, lastStatusChange=f"Resumed: {time.ctime()}")
            if f.name == "podBidResume":
                pod["costPerHr"] = round(float(inp.get("bidPerGpu") or 0) * pod["gpuCount"], 4)
            return self._visible(pod)
        if f.name == "podTerminate":
            self._pod(str(inp.get("podId")), "pod not found to terminate")["desiredStatus"] = "TERMINATED"
            return None
        raise QueryError(f'Cannot query field "{f.name}" on type "{"Query"}".')

    def _execute(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            _, fields = parse(str(body.get("query") or ""), body.get("variables") or {})
        except GraphQLSyntaxError as e:
            return {"errors": [{"message": str(e)}], "data": None}
        data: dict[str, Any] = {}
        with self._lock:
            for f in fields:
                self.requests.append((f.name, dict(f.args.get("input") or {})))
                failure = next((x for x in self._failures if x["op"] == f.name and x["left"] > 0), None)
                try:
                    if failure is not None:
                        failure["left"] -= 1
                        if failure["after"]:
                            self._resolve(f)
                        raise QueryError(failure["message"])
                    data[f.key] = project(self._resolve(f), f.selection)
                except QueryError as e:
                    return {"errors": [{"message": str(e), "path": [f.key]}], "data": None}
        return {"data": data}

    def _handler(self):
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.split("?")[0].rstrip("/") != "/graphql":
                    return self._send(404, {"errors": [{"message": "Not Found"}]})
                if self.headers.get("Authorization") != f"Bearer {double.api_key}":
                    return self._send(401, {"errors": [{"message": "Unauthorized"}]})
                try:
                    doc = json.loads(body or b"{}")
                except ValueError:
                    return self._send(400, {"errors": [{"message": "Body is not JSON"}]})
                self._send(200, double._execute(doc))

            def _send(self, status: int, doc: dict[str, Any]) -> None:
                out = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        return Handler
