"""`launchpad dashboard`: the jobs and one job's run (loss curve, eval loss, speed, checkpoints, events,
log tail) on a local web page that refreshes by itself. It reads the state and the stores the CLI reads
and writes nothing (launchpad.dashboard.data); the server is uvicorn, the application Starlette
(launchpad.dashboard.app), the chart uPlot served from the package (static/vendor)."""

from __future__ import annotations

import ipaddress
import secrets
import socket
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Binding:
    host: str
    port: int
    token: str | None  # required in the URL when the address is not loopback

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/" + (f"?token={self.token}" if self.token else "")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(host: str, port: int, *, refresh_s: float, token: str | None = None,
          on_ready: Callable[[Binding], None] = lambda b: None) -> None:
    """Serve until interrupted (Ctrl-C, SIGTERM). The socket is bound first, so `port` 0 takes a free
    port and `on_ready` hears the real one; beyond loopback a token is made when none is given."""
    try:
        import uvicorn
    except ImportError:  # a core dependency: only a broken install lacks it
        from ..errors import NotConfigured

        raise NotConfigured("the dashboard needs uvicorn and starlette",
                            hint="pip install 'uvicorn>=0.30' 'starlette>=0.40'") from None
    from ..errors import BadInput
    from .app import make_app
    from .data import DashboardData

    loopback = is_loopback(host)
    token = None if loopback else (token or secrets.token_urlsafe(24))
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise BadInput(f"--host {host} --port {port}: cannot listen there ({e.strerror}); "
                       "choose another port, e.g. --port 0 for any free one") from None
    sock.listen(64)
    bound = Binding(host, sock.getsockname()[1], token)
    hosts = None
    if loopback:
        hosts = ["127.0.0.1", "localhost", "[::1]", "::1"]
    data = DashboardData()
    app = make_app(data, refresh_s=refresh_s, token=token, loopback_hosts=hosts)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
    on_ready(bound)
    try:
        server.run(sockets=[sock])
    finally:
        data.close()
        sock.close()
