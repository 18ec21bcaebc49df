"""Who may reach a cloud machine's port 22 (launchpad.ssh.target.ssh_cidrs, shared by aws, gcp and azure):
the configured CIDRs, else this machine's address asked of a "my IP" service (a loopback one here)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from launchpad.errors import ConfigError
from launchpad.ssh.target import ssh_cidrs


def test_configured_cidrs_win():
    assert ssh_cidrs("10.0.0.0/8", "aws") == ["10.0.0.0/8"]
    assert ssh_cidrs(["1.2.3.4/32", "5.6.7.0/24"], "gcp") == ["1.2.3.4/32", "5.6.7.0/24"]


def test_else_this_machines_public_address_as_a_slash_32():
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = b"203.0.113.7\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert ssh_cidrs(None, "azure", url=f"http://127.0.0.1:{server.server_address[1]}/") == ["203.0.113.7/32"]
    finally:
        server.shutdown()
        server.server_close()


def test_no_address_names_the_setting():
    with pytest.raises(ConfigError) as e:
        ssh_cidrs(None, "gcp", url="http://127.0.0.1:9/")  # nothing listens on the discard port
    assert "providers.gcp.ssh_cidr" in str(e.value)
