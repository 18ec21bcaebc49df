"""The HTTP side of the Kubernetes API double (kube_double.py): REST routes, watch streams, the eviction
subresource and the exec websocket (the ``v5``/``v4.channel.k8s.io`` protocols), over the double's state."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlparse

from kube_double import KubeDouble, _fields_match, _matches, _status

_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

_ROUTES = {"jobs": "Job", "pods": "Pod", "secrets": "Secret", "events": "Event"}


class _Handler(BaseHTTPRequestHandler):
    kube: KubeDouble
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else None

    def _route(self, method: str) -> None:
        url = urlparse(self.path)
        q = parse_qs(url.query)
        body = self._body() if method in ("POST", "DELETE", "PUT", "PATCH") else None
        self.kube.requests.append((method, url.path, body))
        if self.headers.get("Authorization") != f"Bearer {self.kube.token}":
            return self._send(401, _status(401, "Unauthorized", "Unauthorized"))
        parts = [p for p in url.path.split("/") if p]
        if parts == ["version"]:
            return self._send(200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0-double", "gitCommit": "0" * 40,
                                    "gitTreeState": "clean", "buildDate": "2024-04-17T00:00:00Z", "goVersion": "go1.22",
                                    "compiler": "gc", "platform": "linux/amd64"})
        if parts[:3] == ["api", "v1", "nodes"] and method == "GET":
            sel = q.get("labelSelector", [None])[0]
            items = [n for n in self.kube.list_objects("Node") if _matches(n["metadata"]["labels"], sel)]
            return self._send(200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items})
        if parts[:2] == ["api", "v1"] and len(parts) >= 5 and parts[2] == "namespaces":
            ns, rest = parts[3], parts[4:]
        elif parts[:3] == ["apis", "batch", "v1"] and len(parts) >= 6 and parts[3] == "namespaces":
            ns, rest = parts[4], parts[5:]
        else:
            return self._send(404, _status(404, "NotFound", f"the server could not find {url.path}"))
        kind = _ROUTES.get(rest[0])
        if kind is None:
            return self._send(404, _status(404, "NotFound", f"the server could not find {url.path}"))
        if len(rest) == 1 and method == "GET":
            sel, fsel = q.get("labelSelector", [None])[0], q.get("fieldSelector", [None])[0]
            if q.get("watch", [""])[0].lower() in ("true", "1"):
                return self._watch(kind, ns, sel, fsel, float(q.get("timeoutSeconds", ["30"])[0]),
                                   since_now=bool(q.get("resourceVersion", [""])[0]))
            items = [o for o in self.kube.list_objects(kind, ns) if _matches(o["metadata"].get("labels") or {}, sel)
                     and _fields_match(o, fsel)]
            if q.get("limit"):
                items = items[: int(q["limit"][0])]
            return self._send(200, {"kind": f"{kind}List", "apiVersion": "batch/v1" if kind == "Job" else "v1",
                                    "metadata": {"resourceVersion": str(self.kube._rv)}, "items": items})
        if len(rest) == 1 and method == "POST":
            return self._send(*self.kube.create(kind, ns, body or {}))
        name = rest[1] if len(rest) > 1 else ""
        obj = self.kube.get(kind, ns, name)
        if len(rest) == 2 and method == "DELETE":
            return self._send(*self.kube.delete(kind, ns, name, body))
        if obj is None:
            return self._send(404, _status(404, "NotFound", f'{rest[0]} "{name}" not found'))
        if len(rest) == 2 and method == "GET":
            return self._send(200, obj)
        if kind == "Pod" and rest[2:] == ["log"]:
            path = self.kube.pod_dir(obj) / "container.log"
            text = path.read_text(errors="replace") if path.exists() else ""
            if q.get("tailLines"):
                text = "".join(text.splitlines(keepends=True)[-int(q["tailLines"][0]):])
            return self._send(200, text, "text/plain")
        if kind == "Pod" and rest[2:] == ["exec"]:
            return self._exec(obj, q)
        if kind == "Pod" and rest[2:] == ["eviction"] and method == "POST":
            return self._send(*self.kube.evict(obj))
        return self._send(405, _status(405, "MethodNotAllowed", f"{method} {url.path}"))

    do_GET = lambda self: self._route("GET")  # noqa: E731
    do_POST = lambda self: self._route("POST")  # noqa: E731
    do_DELETE = lambda self: self._route("DELETE")  # noqa: E731

    def _watch(self, kind: str, ns: str, sel: str | None, fsel: str | None, timeout: float, *, since_now: bool) -> None:
        """``?watch=true``: a chunked stream of {"type": ADDED|MODIFIED|DELETED, "object": ...} lines until
        timeoutSeconds. Without resourceVersion every matching object comes first as ADDED (as the API does);
        with one, only changes from now on (the double keeps no history to replay from an older version)."""
        def snapshot() -> dict[str, str]:
            while True:
                try:
                    with self.kube.lock:
                        return {o["metadata"]["name"]: json.dumps(o, sort_keys=True) for o in self.kube.list_objects(kind, ns)
                                if _matches(o["metadata"].get("labels") or {}, sel) and _fields_match(o, fsel)}
                except RuntimeError:  # a kubelet thread changed a dict mid-dump: look again
                    time.sleep(0.01)

        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        seen = snapshot() if since_now else {}
        deadline = time.monotonic() + timeout
        try:
            while True:
                now = snapshot()
                events = [("ADDED" if n not in seen else "MODIFIED", t) for n, t in now.items() if seen.get(n) != t]
                events += [("DELETED", t) for n, t in seen.items() if n not in now]
                for type_, text in events:
                    line = json.dumps({"type": type_, "object": json.loads(text)}).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
                seen = now
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):  # the client stopped watching
            self.close_connection = True

    # -- the exec websocket ----------------------------------------------------------------------------
    def _exec(self, pod: dict, q: dict) -> None:
        if self.headers.get("Upgrade", "").lower() != "websocket":
            return self._send(400, _status(400, "BadRequest", "exec needs a websocket upgrade"))
        if pod["status"].get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
            return self._send(400, _status(400, "BadRequest", "container not running"))
        offered = [p.strip() for p in (self.headers.get("Sec-WebSocket-Protocol") or "").split(",")]
        proto = next((p for p in ("v5.channel.k8s.io", "v4.channel.k8s.io") if p in offered), None)
        if proto is None:
            return self._send(400, _status(400, "BadRequest", "no supported channel protocol"))
        key = self.headers["Sec-WebSocket-Key"]
        accept = base64.b64encode(hashlib.sha1((key + _WS_GUID).encode()).digest()).decode()
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.send_header("Sec-WebSocket-Protocol", proto)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        ws = _WebSocket(self.connection, self.rfile)
        want_stdin = q.get("stdin", ["false"])[0].lower() == "true"
        try:
            proc = self.kube.exec_process(pod, q.get("command", []), want_stdin)
        except OSError as e:
            ws.send(bytes([3]) + json.dumps({"metadata": {}, "status": "Failure", "reason": "InternalError",
                                             "message": f"exec failed: {e}"}).encode())
            ws.close()
            return
        pumps = [threading.Thread(target=self._pump, args=(proc.stdout, 1, ws), daemon=True),
                 threading.Thread(target=self._pump, args=(proc.stderr, 2, ws), daemon=True)]
        for t in pumps:
            t.start()
        threading.Thread(target=self._feed, args=(ws, proc, proto), daemon=True).start()
        for t in pumps:
            t.join()
        rc = proc.wait()
        if rc == 0:
            status = {"metadata": {}, "status": "Success"}
        else:
            status = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                      "message": f"command terminated with non-zero exit code: exit status {rc}",
                      "details": {"causes": [{"reason": "ExitCode", "message": str(rc if rc >= 0 else 128 - rc)}]}}
        try:
            ws.send(bytes([3]) + json.dumps(status).encode())
            ws.close()
        except OSError:
            pass

    @staticmethod
    def _pump(pipe, channel: int, ws: _WebSocket) -> None:
        while chunk := pipe.read1(65536):
            try:
                ws.send(bytes([channel]) + chunk)
            except OSError:
                break

    @staticmethod
    def _feed(ws: _WebSocket, proc: subprocess.Popen, proto: str) -> None:
        try:
            while True:
                frame = ws.recv()
                if frame is None:
                    break
                if not frame:
                    continue
                if frame[0] == 0 and proc.stdin is not None:
                    try:
                        proc.stdin.write(frame[1:])
                        proc.stdin.flush()
                    except (BrokenPipeError, ValueError):
                        pass
                elif frame[0] == 255 and proto.startswith("v5") and frame[1:2] == b"\x00" and proc.stdin is not None:
                    proc.stdin.close()
        except OSError:
            pass
        finally:
            if proc.stdin is not None and not proc.stdin.closed:
                try:
                    proc.stdin.close()
                except OSError:
                    pass


class _WebSocket:
    """Server side of RFC 6455: unmasked binary frames out, masked frames in."""

    def __init__(self, sock: socket.socket, rfile):
        self.sock, self.rfile = sock, rfile
        self.lock = threading.Lock()
        self.closed = False

    def _frame(self, opcode: int, payload: bytes) -> bytes:
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([n])
        elif n < 65536:
            head += bytes([126]) + struct.pack(">H", n)
        else:
            head += bytes([127]) + struct.pack(">Q", n)
        return head + payload

    def send(self, payload: bytes, opcode: int = 2) -> None:
        with self.lock:
            if self.closed:
                raise OSError("websocket closed")
            self.sock.sendall(self._frame(opcode, payload))

    def close(self) -> None:
        with self.lock:
            if not self.closed:
                self.closed = True
                try:
                    self.sock.sendall(self._frame(8, struct.pack(">H", 1000)))
                except OSError:
                    pass

    def _read(self, n: int) -> bytes:
        data = self.rfile.read(n)
        if len(data) < n:
            raise EOFError
        return data

    def recv(self) -> bytes | None:
        """The next data message (fragments joined), or None once the peer closed."""
        message = b""
        try:
            while True:
                b0, b1 = self._read(2)
                opcode, n = b0 & 0x0F, b1 & 0x7F
                if n == 126:
                    n = struct.unpack(">H", self._read(2))[0]
                elif n == 127:
                    n = struct.unpack(">Q", self._read(8))[0]
                mask = self._read(4) if b1 & 0x80 else b"\0\0\0\0"
                raw = self._read(n)
                if b1 & 0x80 and n:
                    key = (mask * (n // 4 + 1))[:n]
                    payload = (int.from_bytes(raw, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")
                else:
                    payload = raw
                if opcode == 8:
                    return None
                if opcode == 9:
                    self.send(payload, 10)
                    continue
                if opcode in (0, 1, 2):
                    message += payload
                    if b0 & 0x80:
                        return message
        except (EOFError, OSError, ValueError):
            return None
