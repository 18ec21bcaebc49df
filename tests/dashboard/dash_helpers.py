"""Starting `launchpad dashboard` as a user does (a subprocess on a free port) and asking it over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@contextmanager
def dashboard(home: Path, *args: str) -> Iterator[dict]:
    """A running `launchpad dashboard --port 0 --json ARGS`: its first line ({"url", "host", "port"})."""
    env = {**os.environ, "LAUNCHPAD_HOME": str(home)}
    proc = subprocess.Popen([sys.executable, "-m", "launchpad", "dashboard", "--port", "0", "--json", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else "no output"
        yield json.loads(line)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def get(url: str, method: str = "GET", **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=20) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()
