"""One loopback HTTP server standing in for everything gpuhunt's providers call during `catalog refresh`, from
the public API references (request and response shapes), data in memory:

    Lambda Cloud API v1           GET  /lambda/api/v1/instance-types, GET /lambda/api/v1/images (Bearer key)
    Vast.ai bundles search        POST /vast/api/v0/bundles/ (filters in the JSON body: eq/gte/lte...)
    RunPod GraphQL                POST /runpod/graphql (gpuTypes, lowestPrice, dataCenters, cpuFlavors)
    dstack's published catalogs   GET  /published/<provider>/version, /published/<provider>/<version>/catalog.zip
                                  (a zip holding <provider>.csv in gpuhunt's v2 columns; GPUHUNT_CATALOG_URL)

Lambda, Vast and RunPod have no setting for their endpoint: the tests point gpuhunt's module constants at
`double.url(...)` with monkeypatch (gpuhunt's configuration, not launchpad's code). `fail` (an INJECTION of a
provider's 5xx, which cannot be caused for real here) makes a path prefix answer 500. `requests` records each
(method, path, Authorization header) so a test can check what was sent.
"""

from __future__ import annotations

import csv
import io
import json
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LAMBDA_KEY = "secret_test-lambda-key_0123456789abcdef"

LAMBDA_TYPES = {
    "gpu_1x_a10": ("1x A10 (24 GB PCIe)", 75, 30, 200, 1400),
    "gpu_8x_h100_sxm5": ("8x H100 (80 GB SXM5)", 2392, 208, 1800, 22000),
    "gpu_1x_gh200": ("1x GH200 (96 GB)", 149, 64, 432, 4000),
    "cpu_4x_general": ("CPU only", 8, 4, 16, 100),  # gpuhunt cannot parse a GPU out of it: skipped
}
LAMBDA_REGIONS = ("us-east-1", "us-west-1")

VAST_OFFERS = [  # fields as the bundles search returns them (a subset: the ones a client reads)
    {"id": 9001, "num_gpus": 1, "gpu_name": "RTX 4090", "gpu_ram": 24564, "cpu_cores": 32, "cpu_cores_effective": 8.0,
     "cpu_ram": 128000, "disk_space": 100.0, "dph_base": 0.35, "dph_total": 0.36, "storage_cost": 0.1,
     "min_bid": 0.2, "geolocation": "Oslo, NO", "rentable": True, "rented": False, "reliability2": 0.995,
     "compute_cap": 890, "cuda_max_good": 12.8},
    {"id": 9002, "num_gpus": 2, "gpu_name": "A100 SXM4", "gpu_ram": 81920, "cpu_cores": 64, "cpu_cores_effective": 32.0,
     "cpu_ram": 512000, "disk_space": 500.0, "dph_base": 2.4, "dph_total": 2.47, "storage_cost": 0.15,
     "min_bid": None, "geolocation": "California, US", "rentable": True, "rented": False, "reliability2": 0.98,
     "compute_cap": 800, "cuda_max_good": 12.4},
    {"id": 9003, "num_gpus": 1, "gpu_name": "RTX A6000", "gpu_ram": 49140, "cpu_cores": 16, "cpu_cores_effective": 16.0,
     "cpu_ram": 64000, "disk_space": 200.0, "dph_base": 0.5, "dph_total": 0.52, "storage_cost": 0.1,
     "min_bid": 0.3, "geolocation": "Texas, US", "rentable": True, "rented": True, "reliability2": 0.99,  # rented
     "compute_cap": 860, "cuda_max_good": 12.2},
]

RUNPOD_GPUS = [  # (id, manufacturer, displayName, memoryInGb, securePrice, communityPrice, max secure, max community)
    ("NVIDIA A100 80GB PCIe", "Nvidia", "A100 PCIe", 80, 1.64, 1.19, 2, 1),
    ("NVIDIA GeForce RTX 4090", "Nvidia", "RTX 4090", 24, 0.69, 0.34, 2, 1),
]
RUNPOD_DCS = ("US-TX-3", "EU-RO-1")
RUNPOD_COUNTRIES = ("CA",)

# dstack's published catalogs (gpuhunt's v2 columns): on-demand and spot rows, a CPU-only row, a TPU, a flag
PUBLISHED_VERSION = "20261120-0600"
_V2 = ["instance_name", "location", "price", "cpu", "memory", "gpu_count", "gpu_name", "gpu_memory", "spot",
       "disk_size", "gpu_vendor", "flags", "cpu_arch", "provider_data"]
PUBLISHED: dict[str, list[tuple]] = {
    "lambdalabs": [
        ("gpu_1x_a10", "us-east-1", 0.75, 30, 214.8, 1, "A10", 24.0, False, 1503.6, "nvidia", "", "x86"),
        ("gpu_1x_a10", "us-west-1", 0.75, 30, 214.8, 1, "A10", 24.0, False, 1503.6, "nvidia", "", "x86"),
        ("gpu_8x_h100_sxm5", "us-east-1", 23.92, 208, 1933.2, 8, "H100", 80.0, False, 23628.0, "nvidia", "", "x86"),
        ("gpu_1x_gh200", "us-east-1", 1.49, 64, 463.97, 1, "GH200", 96.0, False, 4296.0, "nvidia", "lambda-arm", "arm"),
    ],
    "aws": [
        ("g5.xlarge", "us-east-1", 1.006, 4, 16.0, 1, "A10G", 24.0, False, None, "nvidia", "", "x86"),
        ("g5.xlarge", "us-east-1", 0.4112, 4, 16.0, 1, "A10G", 24.0, True, None, "nvidia", "", "x86"),
        ("p5.48xlarge", "us-east-1", 55.04, 192, 2048.0, 8, "H100", 80.0, False, None, "nvidia", "", "x86"),
        ("m5.large", "us-east-1", 0.096, 2, 8.0, 0, None, None, False, None, None, "", "x86"),
    ],
    "gcp": [
        ("g2-standard-4", "us-central1-a", 0.70683, 4, 16.0, 1, "L4", 24.0, False, None, "nvidia", "", "x86"),
        ("g2-standard-4", "us-central1-a", 0.28073, 4, 16.0, 1, "L4", 24.0, True, None, "nvidia", "", "x86"),
        ("a3-highgpu-8g", "us-central1-a", 88.25, 208, 1872.0, 8, "H100", 80.0, False, None, "nvidia",
         "gcp-dws-calendar-mode", "x86"),
        ("v5litepod-1", "us-central1-a", 1.2, 24, 48.0, 1, "v5litepod", 16.0, False, None, "google", "", "x86"),
    ],
    "azure": [
        ("Standard_NC24ads_A100_v4", "eastus", 3.673, 24, 220.0, 1, "A100", 80.0, False, None, "nvidia", "", "x86"),
        ("Standard_NC24ads_A100_v4", "eastus", 1.0, 24, 220.0, 1, "A100", 80.0, True, None, "nvidia", "", "x86"),
    ],
    "runpod": [
        ("NVIDIA A100 80GB PCIe", "US-TX-3", 1.64, 8, 117.0, 1, "A100", 80.0, False, None, "nvidia", "", "x86"),
    ],
}


def published_csv(provider: str) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(_V2)
    for row in PUBLISHED[provider]:
        w.writerow(["" if v is None else v for v in row] + ["{}"])
    return buf.getvalue()


def _zip(provider: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{provider}.csv", published_csv(provider))
    return buf.getvalue()


def _vast_matches(offer: dict[str, Any], filters: dict[str, Any]) -> bool:
    ops = {"eq": lambda a, b: a == b, "gte": lambda a, b: a >= b, "lte": lambda a, b: a <= b,
           "gt": lambda a, b: a > b, "lt": lambda a, b: a < b, "in": lambda a, b: a in b}
    for key, cons in filters.items():
        if not isinstance(cons, dict) or key not in offer:
            continue
        if not all(ops[op](offer[key], v) for op, v in cons.items() if op in ops):
            return False
    return True


def _runpod(query: str, variables: dict[str, Any]) -> dict[str, Any]:
    if "manufacturer" in query:
        return {"gpuTypes": [{"id": g[0], "manufacturer": g[1], "displayName": g[2], "memoryInGb": g[3]}
                             for g in RUNPOD_GPUS]}
    if "countryCodes" in query:
        return {"countryCodes": [*RUNPOD_COUNTRIES, None],
                "dataCenters": [{"id": dc, "name": dc, "listed": True, "__typename": "DataCenter"} for dc in RUNPOD_DCS],
                "gpuTypes": [{"id": g[0], "displayName": g[2], "memoryInGb": g[3], "maxGpuCountSecureCloud": g[6],
                              "maxGpuCountCommunityCloud": g[7], "minPodGpuCount": 1, "secureCloud": True,
                              "communityCloud": True, "__typename": "GpuType"} for g in RUNPOD_GPUS]}
    if "cpuFlavors" in query:
        return {"cpuFlavors": [{"id": "cpu3c", "displayName": "Compute-Optimized", "groupId": "cpu3", "minVcpu": 2,
                                "maxVcpu": 8, "ramMultiplier": 2, "diskLimitPerVcpu": 10,
                                "specifics": {"stockStatus": "High", "securePrice": 0.06}}]}
    if "CpuDataCenters" in query:
        return {"dataCenters": [{"id": dc, "listed": True} for dc in RUNPOD_DCS]}
    if "lowestPrice" in query:
        cluster = bool((variables.get("gpuTypesInput") or {}).get("cluster"))
        lp = variables.get("lowestPriceInput") or {}
        out = []
        for gid, _, name, mem, secure, community, max_s, max_c in RUNPOD_GPUS:
            count = lp.get("gpuCount") or 1
            in_stock = cluster or count <= (max_s if lp.get("secureCloud") else max_c)
            out.append({"id": gid, "displayName": name, "memoryInGb": mem, "securePrice": secure,
                        "communityPrice": community, "clusterPrice": secure * 0.9, "maxGpuCountSecureCloud": 8,
                        "maxGpuCountCommunityCloud": max_c, "nodeGroupDatacenters": [{"id": RUNPOD_DCS[0]}],
                        "oneMonthPrice": None, "threeMonthPrice": None, "sixMonthPrice": None, "__typename": "GpuType",
                        "lowestPrice": {"minimumBidPrice": round(secure * 0.5, 3), "uninterruptablePrice": secure,
                                        "minVcpu": 8 * count, "minMemory": 60 * count,
                                        "stockStatus": "High" if in_stock else None, "compliance": [],
                                        "countryCode": lp.get("countryCode"), "__typename": "LowestPrice"}})
        return {"gpuTypes": out}
    raise KeyError(query[:60])


class GpuhuntDouble:
    def __init__(self) -> None:
        self.fail: set[str] = set()
        self.requests: list[tuple[str, str, str]] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes | str | dict, ctype: str = "application/json") -> None:
                data = json.dumps(body).encode() if isinstance(body, dict) else (
                    body.encode() if isinstance(body, str) else body)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}") if n else {}
                path = self.path.split("?", 1)[0]
                double.requests.append((method, path, self.headers.get("Authorization", "")))
                if any(path.startswith(p) for p in double.fail):
                    return self._send(500, {"error": "internal server error (injected)"})
                try:
                    status, out, ctype = double.route(method, path, self.headers.get("Authorization", ""), body)
                except KeyError:
                    status, out, ctype = 404, {"error": f"no route {method} {path}"}, "application/json"
                self._send(status, out, ctype)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def route(self, method: str, path: str, auth: str, body: dict) -> tuple[int, Any, str]:
        j = "application/json"
        if path.startswith("/lambda/"):
            if auth != f"Bearer {LAMBDA_KEY}":
                return 401, {"error": {"code": "global/invalid-api-key",
                                       "message": "API key was invalid, expired, or deleted."}}, j
            if path == "/lambda/api/v1/instance-types":
                return 200, {"data": {name: {"instance_type": {
                    "name": name, "description": desc, "gpu_description": desc.partition(" ")[2],
                    "price_cents_per_hour": cents, "specs": {"vcpus": cpu, "memory_gib": mem, "storage_gib": disk,
                                                             "gpus": int(desc[0]) if desc[0].isdigit() else 0}},
                    "regions_with_capacity_available": [{"name": LAMBDA_REGIONS[0], "description": "Virginia, USA"}]}
                    for name, (desc, cents, cpu, mem, disk) in LAMBDA_TYPES.items()}}, j
            if path == "/lambda/api/v1/images":
                return 200, {"data": [{"id": f"img-{r}", "name": "lambda-stack-22-04", "family": "lambda-stack",
                                       "version": "22.04", "architecture": "x86_64",
                                       "region": {"name": r, "description": r}} for r in LAMBDA_REGIONS]}, j
        if method == "POST" and path == "/vast/api/v0/bundles/":
            return 200, {"offers": [o for o in VAST_OFFERS if _vast_matches(o, body)]}, j
        if method == "POST" and path == "/runpod/graphql":
            return 200, {"data": _runpod(body.get("query", ""), body.get("variables") or {})}, j
        if path.startswith("/published/"):
            parts = path.split("/")[2:]
            if parts[0] in PUBLISHED and parts[1:] == ["version"]:
                return 200, PUBLISHED_VERSION + "\n", "text/plain"
            if parts[0] in PUBLISHED and parts[1:] == [PUBLISHED_VERSION, "catalog.zip"]:
                return 200, _zip(parts[0]), "application/zip"
        raise KeyError(path)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
