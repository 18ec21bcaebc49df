"""Where the time until training goes: each phase of a job's start, from the state DB's events.

The lifecycle records (see launchpad.lifecycle) ``attempt`` / ``auto-resume`` (a run begins),
``provision:attempt`` and ``provision:ok``, ``synced`` with the provider's own spans (`sync_facts`:
a `VMProvider` measures reachable, sync and environment), and ``agent:phases`` with the times the agent
and the trainer put in status.json (`record_agent_phases`). `phase_times` turns the newest run's events
into spans:

    provision    provision:attempt -> provision:ok           (a cloud's API call; claiming an SSH host)
    reachable    sync begins -> the first command on the instance returned (SSH up)
    sync         the launchpad wheel, datasets/model/DeepSpeed files, job.json
    environment  the venv on the host (reuse, or install with uv, from the wheel cache when it has one)
                 and the environment check
    launch       the agent started over SSH (environment end -> the agent's "starting")
    prewarm      the agent's pre-warm: dataset and weights to local disk (and the stack's imports)
    loading      the trainer process: Python, imports, model and dataset loaded
    first_step   the first optimizer step
    total        the run's start -> the first step's end (what a user waits before training runs)

Times are unix seconds; the client's clock for the first four, the instance's for the rest (on a cloud
VM with NTP they agree to milliseconds; a badly skewed host shows it as a negative launch span).
What a real cloud adds before any of these (boot, image pull) happens inside `provision` or before
`reachable`, depending on when the provider returns from `provision`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PHASES = ("provision", "reachable", "sync", "environment", "launch", "prewarm", "loading", "first_step")
#: the synced event's data taken from `VMProvider.last_sync`
_SYNC_KEYS = ("phases", "venv", "installer", "source", "env_seconds", "wheel_cache", "wheel", "bytes", "nodes")
#: the agent's and the trainer's marks (status.json "phase_times") that phase spans are made of
_AGENT_MARKS = ("starting", "prewarm", "prewarm_done", "trainer_start", "loading", "training", "first_step")


def sync_facts(provider: Any) -> dict[str, Any]:
    """What the provider measured in its last `sync`, for the ``synced`` event (empty if nothing)."""
    last = getattr(provider, "last_sync", None)
    if not isinstance(last, Mapping):
        return {}
    return {k: last[k] for k in _SYNC_KEYS if k in last}


def record_agent_phases(db, job_id: str, times: Mapping[str, float], seen: dict[str, dict[str, float]]) -> None:
    """Add an ``agent:phases`` event when status.json reports phase times not recorded yet. `seen` is
    the caller's memory of what it recorded (per job), so a poll loop writes one event per new mark."""
    marks = {k: float(v) for k, v in times.items() if k in _AGENT_MARKS}
    if not marks:
        return
    last = seen.get(job_id)
    if last is None:  # another process (an earlier `status`) may have recorded it already
        last = next((e["data"].get("times", {}) for e in reversed(list(db.events(job_id)))
                     if e["kind"] == "agent:phases"), {})
        seen[job_id] = last
    if all(last.get(k) == v for k, v in marks.items()):
        return
    db.add_event(job_id, "agent:phases", {"times": marks})
    seen[job_id] = marks


def _span(start: float | None, end: float | None) -> dict[str, float] | None:
    if start is None or end is None:
        return None
    return {"start": round(start, 3), "end": round(end, 3), "seconds": round(end - start, 3)}


def phase_times(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The newest run's phases as {phase: {"start", "end", "seconds"}} (only those known so far), plus
    "total" once the first step is done, and "environment_detail" (what the venv set-up did)."""
    run: dict[str, Any] = {}
    for e in events:
        kind, data = e["kind"], e.get("data") or {}
        if kind in ("attempt", "auto-resume"):
            run = {"start": e["ts"]}
        elif kind == "provision:attempt":
            if "provision_ok" in run or "synced" in run:  # a new provisioning round in the same run
                run = {"start": run.get("start", e["ts"])}
            run.setdefault("provision_start", e["ts"])
        elif kind == "provision:ok":
            run["provision_ok"] = e["ts"]
        elif kind == "synced":
            run["synced"] = data
            run.pop("agent", None)
        elif kind == "agent:phases":
            run["agent"] = data.get("times") or {}
    out: dict[str, Any] = {}
    if span := _span(run.get("provision_start"), run.get("provision_ok")):
        out["provision"] = span
    synced = run.get("synced") or {}
    for name in ("reachable", "sync", "environment"):
        pair = (synced.get("phases") or {}).get(name)
        if isinstance(pair, (list, tuple)) and len(pair) == 2 and (span := _span(*pair)):
            out[name] = span
    a = run.get("agent") or {}
    env_end = out.get("environment", {}).get("end")
    spans = {
        "launch": (env_end, a.get("starting")),
        "prewarm": (a.get("prewarm"), a.get("prewarm_done")),
        "loading": (a.get("trainer_start") or a.get("prewarm_done"), a.get("training")),
        "first_step": (a.get("training"), a.get("first_step")),
    }
    for name, (start, end) in spans.items():
        if span := _span(start, end):
            out[name] = span
    start = run.get("start") or run.get("provision_start")
    if start is not None and a.get("first_step") is not None:
        out["total"] = _span(start, a["first_step"])
    detail = {k: synced[k] for k in ("venv", "installer", "source", "env_seconds", "wheel_cache") if k in synced}
    if detail:
        out["environment_detail"] = detail
    return out
