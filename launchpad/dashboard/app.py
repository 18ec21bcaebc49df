"""The dashboard's web application (Starlette): one static page, its script and uPlot from the package
(no CDN: it works offline), and two JSON endpoints the page polls. GET only: it writes nothing.

Access: bound to a loopback address, only requests whose Host header names that address are served (a web
page elsewhere cannot reach it through DNS rebinding); bound anywhere else, every request needs the token
`launchpad dashboard` printed in the URL, after which a cookie carries it (HttpOnly, SameSite=Strict).
"""

from __future__ import annotations

import json
import secrets
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from .data import DashboardData

TOKEN_COOKIE = "launchpad_dashboard"
#: no inline script or style, nothing from elsewhere; the page is never framed, the token never sent on
_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

_RAW_HEADERS = [(k.lower().encode(), v.encode()) for k, v in _HEADERS.items()]


def make_app(data: DashboardData, *, refresh_s: float = 2.0, token: str | None = None,
             loopback_hosts: list[str] | None = None) -> Starlette:
    """The application. `token`: required on every request (bound beyond loopback). `loopback_hosts`:
    the Host header values accepted (bound to loopback)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.responses import Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    from ..errors import JobNotFound, LaunchpadError

    static = resources.files("launchpad.dashboard") / "static"
    index = (static / "index.html").read_bytes()

    def page(request: Request) -> Response:
        return Response(index, media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-store"})

    def api_jobs(request: Request) -> Response:
        return _json({**data.jobs(), "refresh_s": refresh_s})

    def api_job(request: Request) -> Response:
        try:
            return _json(data.job(request.path_params["job_id"]))
        except JobNotFound as e:
            return _json({"error": str(e)}, status=404)
        except LaunchpadError as e:
            return _json({"error": str(e)}, status=502)

    middleware = [Middleware(_SecurityHeaders)]
    if token:
        middleware.append(Middleware(_TokenRequired, token=token))
    if loopback_hosts:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=loopback_hosts))
    routes = [
        Route("/", page, methods=["GET"]),
        Route("/api/jobs", api_jobs, methods=["GET"]),
        Route("/api/jobs/{job_id}", api_job, methods=["GET"]),
        Mount("/static", StaticFiles(directory=str(static)), name="static"),
    ]
    return Starlette(routes=routes, middleware=middleware)


def _json(body: Any, status: int = 200) -> Response:
    from starlette.responses import Response

    return Response(json.dumps(body, default=str), status_code=status, media_type="application/json",
                    headers={"Cache-Control": "no-store"})


class _SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_RAW_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers if scope["type"] == "http" else send)


class _TokenRequired:
    """The token from `?token=` (then kept in a cookie) or from that cookie; anything else is a 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self.token = app, token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from starlette.requests import Request
        from starlette.responses import PlainTextResponse

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token")
        if given is not None and secrets.compare_digest(given.encode(), self.token.encode()):
            async def keep(message: Message) -> None:  # the page's own requests then carry it as a cookie
                if message["type"] == "http.response.start":
                    cookie = f"{TOKEN_COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                    message["headers"] = [*message.get("headers", []), (b"set-cookie", cookie.encode())]
                await send(message)

            await self.app(scope, receive, keep)
            return
        if secrets.compare_digest(request.cookies.get(TOKEN_COOKIE, "").encode(), self.token.encode()):
            await self.app(scope, receive, send)
            return
        await PlainTextResponse("this dashboard needs its token: open the URL `launchpad dashboard` printed "
                                "(…/?token=…)\n", status_code=401)(scope, receive, send)
