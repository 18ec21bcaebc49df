"""A loopback double of the EC2 instance metadata service (IMDSv2) and GCE's metadata server:
only the endpoints the agent uses, as AWS and Google document them."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class MetadataDouble:
    def __init__(self):
        self.notice = False  # flip to True to announce an interruption
        self.notices_left = 1  # how many polls see the notice (a second machine must not)
        self.token = "token-abc"
        self.requests: list[str] = []
        double = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, body=b"", ctype="text/plain"):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self):
                double.requests.append(f"PUT {self.path}")
                if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                    return self._send(200, double.token.encode())
                return self._send(400)

            def do_GET(self):
                double.requests.append(f"GET {self.path}")
                if self.path == "/latest/meta-data/spot/instance-action":
                    if self.headers.get("X-aws-ec2-metadata-token") != double.token:
                        return self._send(401)
                    if double.notice and double.notices_left > 0:
                        double.notices_left -= 1
                        body = json.dumps({"action": "terminate", "time": "2026-11-29T18:00:00Z"}).encode()
                        return self._send(200, body, "application/json")
                    return self._send(404)
                if self.path == "/computeMetadata/v1/instance/preempted":
                    if self.headers.get("Metadata-Flavor") != "Google":
                        return self._send(403)
                    return self._send(200, b"TRUE" if double.notice else b"FALSE")
                return self._send(404)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
