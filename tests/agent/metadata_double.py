"""A loopback double of the EC2 instance metadata service (IMDSv2), GCE's metadata server and Azure's
Instance Metadata Service (Scheduled Events): only the endpoints the agent uses, as AWS, Google and
Microsoft document them."""

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
                if self.path == "/metadata/scheduledevents?api-version=2020-07-01":
                    if self.headers.get("Metadata") != "true":
                        return self._send(400, b'{"error": "Bad request. Required metadata header not specified"}')
                    events = [{"EventId": "602d9444-d2cd-49c7-8624-8643e7171297", "EventType": "Freeze",
                               "ResourceType": "VirtualMachine", "Resources": ["lp-vm-0"], "EventStatus": "Scheduled",
                               "NotBefore": "Mon, 19 Sep 2026 18:29:47 GMT", "Description": "", "EventSource": "Platform",
                               "DurationInSeconds": 5}]  # a maintenance freeze: never a preemption notice
                    if double.notice:
                        events.append({"EventId": "f020ba2e-3bc0-4c40-a10b-86575a9eabd5", "EventType": "Preempt",
                                       "ResourceType": "VirtualMachine", "Resources": ["lp-vm-0"], "EventStatus": "Scheduled",
                                       "NotBefore": "Mon, 19 Sep 2026 18:30:17 GMT", "Description": "",
                                       "EventSource": "Platform", "DurationInSeconds": -1})
                    body = json.dumps({"DocumentIncarnation": 2 if double.notice else 1, "Events": events}).encode()
                    return self._send(200, body, "application/json")
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
