"""`launchpad dashboard` as a user starts it (a subprocess on a free port), asked over HTTP: who may read
it (loopback: only requests naming a loopback host; beyond loopback: only with the printed token, then its
cookie), GET only, and the headers that keep the page's data on the page."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from dash_helpers import dashboard, get


def test_on_loopback_only_loopback_host_names_are_served(launchpad_home):
    with dashboard(launchpad_home) as d:
        base = d["url"]
        assert d["host"] == "127.0.0.1" and "token" not in base
        status, headers, body = get(base + "api/jobs")
        assert status == 200 and json.loads(body)["jobs"] == []
        assert "default-src 'self'" in headers["content-security-policy"] and headers["referrer-policy"] == "no-referrer"
        status, _, page = get(base)
        assert status == 200 and b'src="static/vendor/uPlot.iife.min.js"' in page and b"<script>" not in page
        assert get(base + "static/vendor/uPlot.iife.min.js")[0] == 200  # served from the package: no CDN
        assert get(base + "api/jobs", Host="attacker.example")[0] == 400  # DNS rebinding
        assert get(base + "api/jobs", method="POST")[0] == 405  # it writes nothing
        assert get(base + "api/jobs/no-such-job")[0] == 404


def test_beyond_loopback_the_token_is_needed_then_kept_in_a_cookie(launchpad_home):
    with dashboard(launchpad_home, "--host", "0.0.0.0") as d:
        url = urlsplit(d["url"])
        token = url.query.removeprefix("token=")
        assert len(token) >= 24
        base = f"http://127.0.0.1:{d['port']}/"
        status, _, body = get(base + "api/jobs")
        assert status == 401 and b"token" in body
        wrong = token[:-1] + ("y" if token.endswith("x") else "x")  # one character off, never the token itself
        assert get(base + "api/jobs?token=" + wrong)[0] == 401
        status, headers, _ = get(base + "?token=" + token)
        assert status == 200
        cookie = headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert get(base + "api/jobs", Cookie=cookie.split(";")[0])[0] == 200
