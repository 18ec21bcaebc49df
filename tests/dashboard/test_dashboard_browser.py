"""The dashboard in a real headless browser (Debian's Chromium: its own --dump-dom and --screenshot) against
jobs that really ran on `local`: a detached job seen while it trains (its row, its curve filling in, the
page refreshing by itself), the same job once it ended (as many chart points as logged steps, its
checkpoints, its log), a failed job's error line, and nothing written by all that reading. The terminal
view of the same run (`launchpad status JOB` at 120 columns, in colour) is drawn to a PNG beside the
page's screenshots: test-artifacts/dashboard/ (LAUNCHPAD_TEST_ARTIFACTS to put them elsewhere)."""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from dash_helpers import dashboard

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("LAUNCHPAD_TEST_ARTIFACTS") or REPO / "test-artifacts") / "dashboard"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium; .ci/run does)")]


def browse(url: str, tmp: Path, *, screenshot: Path | None = None, height: int = 1300) -> str:
    """The page's DOM after its script ran (3 s of the browser's virtual time: fetches complete first)."""
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           f"--user-data-dir={tmp / 'chromium'}", "--virtual-time-budget=3000", f"--window-size=1280,{height}"]
    if screenshot:
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([*cmd, f"--screenshot={screenshot}", url], capture_output=True, timeout=120, check=True)
        assert screenshot.stat().st_size > 10_000, "a blank screenshot"
    return subprocess.run([*cmd, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True).stdout


def attr(dom: str, element_id: str, name: str) -> str:
    m = re.search(rf'id="{element_id}"[^>]*\b{name}="([^"]*)"', dom)
    assert m, f"#{element_id}[{name}] not in the page"
    return m.group(1)


def text_of(dom: str, element_id: str) -> str:
    m = re.search(rf'<(\w+) id="{element_id}"([^>]*)>(.*?)</\1>', dom, re.S)
    assert m, f"#{element_id} not in the page"
    return "" if " hidden" in m.group(2) else html.unescape(re.sub(r"<[^>]+>", "", m.group(3)))


def row_state(dom: str, job_id: str) -> str | None:
    m = re.search(rf'<tr data-job="{re.escape(job_id)}" data-state="(\w+)"', dom)
    return m.group(1) if m else None


def api(base: str, path: str) -> dict:
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return json.loads(r.read())


def recipe(tmp: Path, name: str, dataset: Path, steps: int) -> Path:
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data.update(name=name, max_steps=steps, checkpoint={"every_steps": 50, "keep": 2})
    data["datasets"][0]["path"] = str(dataset)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def fingerprint(home: Path) -> dict[str, str]:
    """Every file under LAUNCHPAD_HOME with its sha256 (SQLite's -shm, its shared-memory index, aside)."""
    return {str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(home.rglob("*")) if p.is_file() and not p.name.endswith("-shm")}


def test_the_dashboard_shows_real_runs_in_a_browser(run_cli, launchpad_home, tmp_path):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text_without_messages": 1}\n' * 3)
    failed = run_cli("up", str(recipe(tmp_path, "dash-bad", broken, 20)), timeout=240)
    assert failed.returncode != 0
    (bad,) = json.loads(run_cli("status", "--json", check=True).stdout)
    assert bad["state"] == "FAILED" and "messages" in bad["error"]

    steps = 200
    run_cli("up", str(recipe(tmp_path, "dash-ok", REPO / "recipes" / "data" / "smoke-chat.jsonl", steps)),
            "--detach", check=True, timeout=240)
    job = next(r["id"] for r in json.loads(run_cli("status", "--json", check=True).stdout) if r["id"] != bad["id"])

    with dashboard(launchpad_home, "--refresh", "0.2") as d:
        base = d["url"]
        # while it trains: what the instance reports, without anything recorded (nobody ran `status`)
        deadline = time.monotonic() + 180
        while (live := api(base, f"api/jobs/{job}"))["step"] < 3:
            assert time.monotonic() < deadline, live
            time.sleep(0.1)
        dom = browse(f"{base}#job={job}", tmp_path, screenshot=ARTIFACTS / "dashboard-training.png")
        assert row_state(dom, job) == "TRAINING" and row_state(dom, bad["id"]) == "FAILED"
        assert int(attr(dom, "chart", "data-points")) >= 3  # the curve so far, from the instance
        assert int(attr(dom, "updated", "data-refreshes")) > 1  # it refreshed by itself

        deadline = time.monotonic() + 300
        while (row := json.loads(run_cli("status", job, "--json", check=True).stdout)[0])["state"] == "TRAINING":
            assert time.monotonic() < deadline, row
            time.sleep(1)
        assert row["state"] == "SUCCEEDED" and row["step"] == steps

        before = fingerprint(launchpad_home)
        dom = browse(f"{base}#job={job}", tmp_path, screenshot=ARTIFACTS / "dashboard-job.png")
        assert row_state(dom, job) == "SUCCEEDED"
        assert attr(dom, "chart", "data-points") == str(steps)  # logging_steps 1: one point per step, from the store
        assert f"checkpoint-{steps}" in text_of(dom, "checkpoints") and f"step {steps}/{steps}" in text_of(dom, "log")
        assert text_of(dom, "job-error") == ""

        dom = browse(f"{base}#job={bad['id']}", tmp_path, screenshot=ARTIFACTS / "dashboard-failed.png", height=900)
        assert text_of(dom, "job-error") == bad["error"]
        assert attr(dom, "chart", "data-points") == "0"
        assert fingerprint(launchpad_home) == before, "the dashboard wrote something"

    # the terminal view of the same run, as a picture: rich's SVG of the CLI's own colour output
    from rich.console import Console
    from rich.text import Text

    shown = run_cli("status", job, check=True, env={"COLUMNS": "120", "FORCE_COLOR": "1", "TERM": "xterm-256color"}).stdout
    assert "200 logged" in shown and "\x1b[" in shown
    console = Console(record=True, width=120, file=open(os.devnull, "w"), force_terminal=True)  # noqa: SIM115
    console.print(Text.from_ansi(shown))
    svg = ARTIFACTS / "status-120.svg"
    console.save_svg(str(svg), title=f"launchpad status {job}")
    browse(svg.as_uri(), tmp_path, screenshot=ARTIFACTS / "status-120.png", height=700)
