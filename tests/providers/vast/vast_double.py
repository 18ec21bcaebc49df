"""A loopback double of Vast.ai's REST API (https://console.vast.ai/api/v0), only the endpoints the vast provider
calls, written from the public reference (docs.vast.ai/api-reference), state in memory:

    show user                 GET    /api/v0/users/current/
    search offers             POST   /api/v0/bundles/            (the query language: {"field": {"op": v}}, order, limit)
    create instance           PUT    /api/v0/asks/{offer id}/    -> {"success": true, "new_contract": id}
    show instances / instance GET    /api/v0/instances/, /api/v0/instances/{id}/   -> {"instances": ...}
    stop / start / label      PUT    /api/v0/instances/{id}/     {"state": "stopped"|"running"} or {"label": ...}
    destroy                   DELETE /api/v0/instances/{id}/
    ssh keys                  GET    /api/v0/ssh/, POST /api/v0/ssh/ {"ssh_key": ...}

Every call needs ``Authorization: Bearer <key>``: the account's key, or the per-instance CONTAINER_API_KEY this
double hands each instance (it may read, stop and destroy only that instance). Errors have the reference's
shape ``{"success": false, "error": code, "msg": text}``; 429 answers are plain text, as the reference says.

The market: machines (`Machine` rows) each listed as one offer of all its GPUs with an ask id that changes
whenever the machine is listed again. Renting one takes its offer off the market until the instance is
destroyed. Every instance is "reached" at `ssh_port` (the loopback sshd that plays every rented machine).

Test controls, named for what they stand in for: `rent_away` (someone else rents a machine), `taken_at_rent`
(someone else rents it between our search and our rent), `outbid` (a higher bid pauses an interruptible
instance), `fail_next` (an INJECTED error Vast returns that cannot be caused for real here: 429, 5xx, a lost
answer).
"""

from __future__ import annotations

import itertools
import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_OPS = {"eq": lambda a, b: a == b, "neq": lambda a, b: a != b, "gt": lambda a, b: a is not None and a > b,
        "gte": lambda a, b: a is not None and a >= b, "lt": lambda a, b: a is not None and a < b,
        "lte": lambda a, b: a is not None and a <= b, "in": lambda a, b: a in b, "notin": lambda a, b: a not in b}
_NOT_FIELDS = {"order", "type", "limit", "allocated_storage", "disable_bundling"}


def machine(machine_id: int, gpu_name: str, *, num_gpus: int = 1, gpu_ram_gb: float = 24, dph_base: float = 0.40,
            min_bid: float | None = 0.20, reliability: float = 0.99, cuda_max_good: float = 12.8,
            geolocation: str = "Sweden, SE", disk_bw: float = 2500.0, inet_down: float = 900.0,
            storage_cost: float = 0.15, verified: bool = True) -> dict[str, Any]:
    """One host as the search lists it (field names and units as in the reference: RAM in MB)."""
    return {"machine_id": machine_id, "host_id": 90_000 + machine_id, "gpu_name": gpu_name, "num_gpus": num_gpus,
            "gpu_ram": int(gpu_ram_gb * 1024), "gpu_total_ram": int(gpu_ram_gb * 1024 * num_gpus),
            "cpu_cores_effective": 8.0 * num_gpus, "cpu_ram": 32768 * num_gpus, "disk_space": 500.0,
            "disk_bw": disk_bw, "inet_down": inet_down, "inet_up": inet_down / 2, "dph_base": dph_base,
            "storage_cost": storage_cost, "min_bid": min_bid, "cuda_max_good": cuda_max_good,
            "reliability": reliability, "reliability2": reliability, "geolocation": geolocation,
            "verified": verified, "verification": "verified" if verified else "unverified", "external": False,
            "datacenter": False, "direct_port_count": 20, "driver_version": "570.86.10", "compute_cap": 890}


class VastDouble:
    def __init__(self, machines: list[dict[str, Any]], *, api_key: str = "vast-test-key", ssh_port: int = 22):
        self.api_key = api_key
        self.ssh_port = ssh_port
        self.machines: dict[int, dict[str, Any]] = {}
        self.template = [dict(m) for m in machines]
        self.instances: dict[int, dict[str, Any]] = {}
        self.ssh_keys: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, Any]] = []
        self.boot_seconds = 0.0  # "loading" (the image being pulled) this long after a rent
        self._failures: list[dict[str, Any]] = []
        self._taken_at_rent: set[int] = set()
        self._asks = itertools.count(7_000_001)
        self._contracts = itertools.count(20_000_001)
        self._lock = threading.RLock()
        self.reset()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, name="vast-double", daemon=True)

    # -- test controls -----------------------------------------------------------------------------------
    def start(self) -> VastDouble:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset(self) -> None:
        with self._lock:
            self.machines = {m["machine_id"]: {**m, "_ask": next(self._asks), "_rented_by": None} for m in self.template}
            self.instances.clear()
            self.ssh_keys.clear()
            self.requests.clear()
            self._failures.clear()
            self._taken_at_rent.clear()
            self.boot_seconds = 0.0

    def rent_away(self, machine_id: int) -> None:
        """Another customer rents the machine: its offer leaves the market."""
        with self._lock:
            self.machines[machine_id]["_rented_by"] = "someone-else"

    def taken_at_rent(self, machine_id: int) -> None:
        """Another customer rents the machine between our search and our rent: our rent finds its ask gone."""
        self._taken_at_rent.add(machine_id)

    def outbid(self, instance_id: int) -> None:
        """A higher bid takes the host: Vast pauses the interruptible instance (it wants to run, it does not)."""
        with self._lock:
            inst = self.instances[instance_id]
            assert inst["is_bid"], "only interruptible instances are outbid"
            inst.update(actual_status="stopped", cur_state="stopped", status_msg="stopped: outbid by a higher bid")

    def fail_next(self, method: str, path_part: str, status: int, body: Any, *, times: int = 1,
                  lose_answer: bool = False) -> None:
        """The next `times` matching calls answer `status`/`body`; with `lose_answer` the call is carried out
        first and only its answer is lost (a gateway timeout after the rent went through)."""
        self._failures.append({"method": method, "path": path_part, "status": status, "body": body, "times": times,
                               "lose_answer": lose_answer})

    def live(self) -> list[dict[str, Any]]:
        with self._lock:
            return [self._visible(i) for i in self.instances.values()]

    def container_key(self, instance_id: int) -> str:
        return self.instances[instance_id]["_container_key"]

    # -- the API ---------------------------------------------------------------------------------------
    @staticmethod
    def _visible(doc: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in doc.items() if not k.startswith("_")}

    def _offer(self, m: dict[str, Any], storage_gb: float) -> dict[str, Any]:
        row = self._visible(m)
        row.update(id=m["_ask"], ask_contract_id=m["_ask"], bundle_id=m["_ask"] + 1_000_000_000,
                   rentable=m["_rented_by"] is None, rented=m["_rented_by"] is not None,
                   dph_total=round(m["dph_base"] + m["storage_cost"] * storage_gb / 720.0, 6))
        return row

    def search(self, query: dict[str, Any]) -> list[dict[str, Any]]:
        rows = [self._offer(m, float(query.get("allocated_storage") or 5.0)) for m in self.machines.values()]
        for field, cond in query.items():
            if field in _NOT_FIELDS:
                continue
            if not isinstance(cond, dict) or not cond or any(op not in _OPS for op in cond):
                raise _Error(400, "invalid_args", f"bad filter for {field}: {cond!r}")
            rows = [r for r in rows if all(_OPS[op](r.get(field), v) for op, v in cond.items())]
        for field, direction in reversed(query.get("order") or []):
            rows.sort(key=lambda r, f=field: (r.get(f) is None, r.get(f)), reverse=direction == "desc")  # type: ignore[misc]
        return rows[: int(query.get("limit") or 64)]

    def rent(self, ask: int, body: dict[str, Any]) -> dict[str, Any]:
        m = next((m for m in self.machines.values() if m["_ask"] == ask), None)
        if m is not None and m["machine_id"] in self._taken_at_rent:
            self._taken_at_rent.discard(m["machine_id"])
            m["_rented_by"] = "someone-else"
        if m is None or m["_rented_by"] is not None:
            raise _Error(400, "no_such_ask", "Instance type no longer available.")
        if not isinstance(body.get("image"), str) or not body["image"]:
            raise _Error(400, "invalid_args", "image is required")
        if body.get("runtype") not in (None, "ssh", "jupyter", "args", "ssh_proxy", "ssh_direct", "jupyter_proxy",
                                       "jupyter_direct"):
            raise _Error(400, "invalid_args", f"unknown runtype {body.get('runtype')!r}")
        if len(str(body.get("onstart") or "")) > 4048:
            raise _Error(400, "invalid_args", "onstart is limited to 4048 characters")
        env = body.get("env") or {}
        if not isinstance(env, dict):
            raise _Error(400, "invalid_args", "env must be an object")
        bid = body.get("price")
        if bid is not None and m["min_bid"] is None:
            raise _Error(400, "invalid_args", "this machine takes no interruptible rentals")
        cid = next(self._contracts)
        n = cid % 250
        outbid = bid is not None and float(bid) < float(m["min_bid"])
        self.instances[cid] = {
            "id": cid, "machine_id": m["machine_id"], "host_id": m["host_id"], "label": body.get("label"),
            "image_uuid": body["image"], "image_runtype": body.get("runtype") or "ssh", "onstart": body.get("onstart"),
            "actual_status": "stopped" if outbid else ("loading" if self.boot_seconds else "running"),
            "intended_status": "running", "cur_state": "stopped" if outbid else "running", "next_state": "running",
            "status_msg": "outbid" if outbid else "", "num_gpus": m["num_gpus"], "gpu_name": m["gpu_name"],
            "gpu_ram": m["gpu_ram"], "cpu_ram": m["cpu_ram"], "geolocation": m["geolocation"],
            "cuda_max_good": m["cuda_max_good"], "reliability2": m["reliability2"], "disk_bw": m["disk_bw"],
            "inet_down": m["inet_down"], "dph_base": float(bid) if bid is not None else m["dph_base"],
            "storage_cost": m["storage_cost"], "disk_space": float(body.get("disk") or 8),
            "dph_total": round((float(bid) if bid is not None else m["dph_base"])
                               + m["storage_cost"] * float(body.get("disk") or 8) / 720.0, 6),
            "is_bid": bid is not None, "min_bid": float(bid) if bid is not None else None,
            "ssh_host": f"ssh{n % 9 + 1}.vast.ai", "ssh_port": self.ssh_port, "ssh_idx": str(n % 9 + 1),
            "public_ipaddr": f"198.51.100.{n}", "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(self.ssh_port)}]},
            "start_date": time.time(), "extra_env": [[k, str(v)] for k, v in env.items()],
            "_container_key": secrets.token_hex(16), "_booted_at": time.monotonic() + self.boot_seconds,
        }
        m["_rented_by"] = cid
        return {"success": True, "new_contract": cid}

    def _instance(self, iid: int) -> dict[str, Any]:
        inst = self.instances.get(iid)
        if inst is None:
            raise _Error(404, "no_such_instance", f"Instance {iid} not found.")
        if inst["actual_status"] == "loading" and time.monotonic() >= inst["_booted_at"]:
            inst["actual_status"] = "running"
        return inst

    def update(self, iid: int, body: dict[str, Any]) -> dict[str, Any]:
        inst = self._instance(iid)
        state = body.get("state")
        if state == "stopped":
            inst.update(intended_status="stopped", actual_status="stopped", cur_state="stopped", status_msg="stopped")
        elif state == "running":
            inst.update(intended_status="running", actual_status="running", cur_state="running", status_msg="")
        elif "label" in body:
            inst["label"] = body["label"]
        else:
            raise _Error(400, "invalid_args", f"nothing to change in {body!r}")
        return {"success": True}

    def destroy(self, iid: int) -> dict[str, Any]:
        self._instance(iid)
        inst = self.instances.pop(iid)
        m = self.machines[inst["machine_id"]]
        if m["_rented_by"] == iid:
            m.update(_rented_by=None, _ask=next(self._asks))  # listed again, under a new ask id
        return {"success": True}

    def route(self, method: str, path: str, body: Any, key: str | None) -> tuple[int, Any]:
        parts = [p for p in path.split("?")[0].split("/") if p]
        if parts[:2] != ["api", "v0"]:
            raise _Error(404, "not_found", path)
        parts = parts[2:]
        own = next((i for i in self.instances.values() if i["_container_key"] == key), None)
        if own is not None:  # a container's key: only its own instance
            if not (len(parts) == 2 and parts[0] == "instances" and parts[1] == str(own["id"])):
                raise _Error(403, "forbidden", "this key may only manage its own instance")
        elif key != self.api_key:
            raise _Error(401, "auth_error", "Invalid user key")
        if parts == ["users", "current"] and method == "GET":
            return 200, {"id": 4242, "username": "lp-test", "email": "lp-test@example.com", "credit": 25.0}
        if parts == ["bundles"] and method == "POST":
            return 200, {"offers": self.search(body or {})}
        if len(parts) == 2 and parts[0] == "asks" and method == "PUT":
            return 200, self.rent(int(parts[1]), body or {})
        if parts == ["instances"] and method == "GET":
            return 200, {"instances": [self._visible(self._instance(i)) for i in sorted(self.instances)]}
        if len(parts) == 2 and parts[0] == "instances":
            iid = int(parts[1])
            if method == "GET":
                return 200, {"instances": self._visible(self._instance(iid))}
            if method == "PUT":
                return 200, self.update(iid, body or {})
            if method == "DELETE":
                return 200, self.destroy(iid)
        if parts == ["ssh"] and method == "GET":
            return 200, list(self.ssh_keys)
        if parts == ["ssh"] and method == "POST":
            text = str((body or {}).get("ssh_key") or "")
            if not text.startswith(("ssh-", "ecdsa-")):
                raise _Error(400, "invalid_args", "not an OpenSSH public key")
            row = {"id": len(self.ssh_keys) + 1, "user_id": 4242, "public_key": text, "created_at": time.time()}
            self.ssh_keys.append(row)
            return 200, {"success": True, "key": row}
        raise _Error(404, "not_found", f"{method} {path}")

    def _handler(self):
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                auth = self.headers.get("Authorization") or ""
                key = auth[7:] if auth.startswith("Bearer ") else None
                with double._lock:
                    double.requests.append((self.command, self.path, body))
                    failure = next((f for f in double._failures if f["method"] == self.command
                                    and f["path"] in self.path), None)
                    if failure is not None:
                        failure["times"] -= 1
                        if failure["times"] <= 0:
                            double._failures.remove(failure)
                        if failure["lose_answer"]:
                            try:
                                double.route(self.command, self.path, body, key)
                            except _Error:
                                pass
                        return self._send(failure["status"], failure["body"])
                    try:
                        status, doc = double.route(self.command, self.path, body, key)
                    except _Error as e:
                        status, doc = e.status, {"success": False, "error": e.code, "msg": e.msg}
                self._send(status, doc)

            def _send(self, status: int, doc: Any):
                text = doc if isinstance(doc, str) else json.dumps(doc)
                data = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain" if isinstance(doc, str) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

        return Handler


class _Error(Exception):
    def __init__(self, status: int, code: str, msg: str):
        super().__init__(msg)
        self.status, self.code, self.msg = status, code, msg
