"""Rendering jobs for people (rich) and scripts (JSON)."""

from __future__ import annotations

import time
from typing import Any

from ._common import console, esc

#: event data the start-up phases table shows (launchpad.phases): not repeated in the events table
_IN_PHASES_TABLE = ("phases", "env_seconds", "times")
#: finished jobs `launchpad status` shows besides the live ones (`--all`: every job): a state with 10,000
#: jobs answers as fast as one with 10, and the table stays readable
STATUS_LATEST = 10
#: characters of the loss sparkline in the jobs table (a column shown when the terminal has room)
CURVE_WIDTH = 16
_STATE_STYLE = {"SUCCEEDED": "green", "FAILED": "red", "INTERRUPTED": "yellow", "TRAINING": "cyan"}


def _age(ts: float | None) -> str:
    if not ts:
        return ""
    s = max(0, time.time() - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.0f}{unit} ago"
    return f"{s:.0f}s ago"


def render_jobs(rows: list[dict[str, Any]], con: Any = None) -> None:
    con = con or console()
    con.print(jobs_view(rows, con.width))


def jobs_view(rows: list[dict[str, Any]], width: int) -> Any:
    """The jobs table, one line per job at any width: the id (what the next command takes) and the state
    are never cut; the other columns give way (see _tables). cost = instance time (`cost_usd`) + block
    volumes (`disk_usd`, which keep billing while an instance is stopped)."""
    from rich.console import Group
    from rich.text import Text

    from ._progress_view import sparkline
    from ._tables import Col, fit_table

    if not rows:
        return Text("no jobs yet: `launchpad up recipes/smoke-lora.yaml` starts one")
    cols = [Col("job", priority=10, whole=True), Col("state", priority=10, whole=True), Col("provider", priority=6),
            Col("step", "right", 7, whole=True), Col("loss", "right", 5, whole=True), Col("curve", priority=4, whole=True),
            Col("last checkpoint", priority=4), Col("cost", "right", 8, whole=True), Col("started", priority=3)]
    cells = []
    for r in rows:
        style = _STATE_STYLE.get(r["state"], "")
        step = f"{r['step']}/{r['total_steps']}" if r.get("total_steps") else str(r["step"])
        ckpt = (r.get("last_checkpoint") or "").rsplit("/", 1)[-1]
        loss = f"{r['loss']:.3f}" if r.get("loss") is not None else ""
        # a live job's loss so far (what `status --watch` shows filling in); finished jobs: see `status JOB`
        curve = f"[cyan]{sparkline([p[1] for p in r['losses']], CURVE_WIDTH)}[/]" if r.get("losses") else ""
        cells.append([r["id"], f"[{style}]{r['state']}[/]" if style else r["state"], r.get("provider") or "",
                      step, loss, curve, ckpt, f"${r['cost_usd'] + (r.get('disk_usd') or 0):.2f}", _age(r.get("created_at"))])
    parts: list[Any] = [fit_table("jobs", cols, cells, width)]
    for r in rows:  # the preflight's warnings (multi-node jobs), one line each under the table
        for warning in r.get("warnings") or []:
            parts.append(Text.from_markup(f"[yellow]![/] {esc(r['id'])}: {esc(warning)}"))
    return Group(*parts)


def render_job(row: dict[str, Any], events: list[dict[str, Any]]) -> None:
    con = console()
    con.print(job_view(row, events, con.width))


def job_view(row: dict[str, Any], events: list[dict[str, Any]], width: int) -> Any:
    """One job: its fields, how the run is going (curve, ETA, cost; launchpad.cli._progress_view), the
    start-up phases and the newest events."""
    from rich.console import Group
    from rich.table import Table

    from ._progress_view import progress_rows

    table = Table(show_header=False, title=row["id"], title_justify="left")
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    for key in ("name", "state", "phase", "provider", "step", "total_steps", "loss", "last_checkpoint", "error", "recipe"):
        value = row.get(key)
        if value is not None:
            table.add_row(key, f"{value:.4g}" if isinstance(value, float) else esc(str(value)))
    for label, text in progress_rows(row, width):
        table.add_row(label, text)
    if row.get("preflight"):
        table.add_row("preflight", _preflight_text(row["preflight"]))
    for warning in row.get("warnings") or []:
        table.add_row("[yellow]warning[/]", esc(warning))
    parts: list[Any] = [table]
    phases = phases_view(row.get("phase_times") or {})
    if phases is not None:
        parts.append(phases)
    ev = Table(title="events", title_justify="left")
    for col in ("when", "event", "details"):
        ev.add_column(col)
    for e in events[-15:]:
        details = ", ".join(f"{k}={v}" for k, v in e["data"].items()
                            if v is not None and k not in _IN_PHASES_TABLE)
        ev.add_row(time.strftime("%H:%M:%S", time.localtime(e["ts"])), e["kind"], esc(details))
    parts.append(ev)
    return Group(*parts)


def render_phases(phases: dict[str, Any]) -> None:
    view = phases_view(phases)
    if view is not None:
        console().print(view)


def phases_view(phases: dict[str, Any]) -> Any:
    """Where the time until the first training step went (launchpad.phases), one row per phase."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from ..phases import PHASES

    rows = [(name, phases[name]) for name in (*PHASES, "total") if isinstance(phases.get(name), dict)]
    if not rows:
        return None
    table = Table(title="start-up phases", title_justify="left")
    for col, justify in (("phase", "left"), ("began", "left"), ("seconds", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for name, span in rows:
        label = "time to first step" if name == "total" else name
        table.add_row(label, time.strftime("%H:%M:%S", time.localtime(span["start"])), f"{span['seconds']:.1f}")
    detail = phases.get("environment_detail") or {}
    how = ", ".join(f"{k} {v}" for k, v in detail.items() if k in ("venv", "installer", "source", "wheel_cache") and v)
    return Group(table, Text(f"environment: {how}")) if how else table


def _preflight_text(p: dict[str, Any]) -> str:
    """``skew 0.003 s; bus bandwidth 10.5 Gb/s (gloo, 2 ranks), 12% of 100 Gb/s promised`` (or failed: ...)."""
    from ..preflight import percent

    parts = []
    if p.get("skew_s") is not None:
        parts.append(f"clock skew {p['skew_s']:.3f} s")
    if p.get("busbw_gbps") is not None:
        bw = f"bus bandwidth {p['busbw_gbps']:.1f} Gb/s ({p.get('backend')}, {p.get('world_size')} ranks)"
        if p.get("expected_gbps"):
            bw += f", {percent(p.get('share') or 0)} of {p['expected_gbps']:g} Gb/s promised"
        parts.append(bw)
    if p.get("failed"):
        parts.append(f"failed: {p['failed']}")
    return esc("; ".join(parts))
