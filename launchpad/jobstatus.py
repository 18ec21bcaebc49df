"""What `launchpad status` shows for each job: a mixin of `launchpad.lifecycle.Lifecycle` (kept apart so
that lifecycle.py stays about driving jobs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import LaunchpadError
from .phases import phase_times
from .preflight import status_fields

if TYPE_CHECKING:
    from .provider import Provider
    from .state import JobRecord, StateDB


class StatusRows:
    """Mixed into `Lifecycle`, which provides what is declared here."""

    if TYPE_CHECKING:
        db: StateDB

        def provider(self, name: str) -> Provider: ...
        def refresh(self, job_id: str) -> JobRecord: ...

    def status_rows(self, job_ref: str | None = None, *,
                    on_error: Callable[[str, LaunchpadError], None] | None = None,
                    latest: int | None = None, refresh: bool = True) -> list[dict[str, Any]]:
        """What `launchpad status` shows: each job (or one), reconciled with its provider first, with
        the live phase and speed when an instance runs. One unreachable provider never hides the other
        jobs: its error goes to `on_error` and its job is shown as last recorded. `latest=N` (no job_ref):
        only the jobs not finished plus the N newest finished ones. `refresh=False`: nothing is recorded (the
        dashboard, which writes nothing): a live job is shown as recorded plus what its instance reports.

        A fixed number of queries whatever the number of jobs (the jobs, then their instances and their
        events in one query each): 10,000 jobs used to take 6 queries each. Providers are asked only
        about live jobs: a finished job's row is what was recorded."""
        import time

        from .errors import JobNotFound
        from .models import InstanceState, JobState
        from .planner.disk import disk_usd_so_far
        from .state import cost_of

        if job_ref:
            listed = [self.db.job(job_ref)]
        else:
            listed = self.db.jobs(live_or_latest=latest) if latest is not None else self.db.jobs()
        jobs = []
        for job in listed:
            if refresh and job.state is JobState.TRAINING:  # its trainer may have ended while nobody watched
                try:
                    job = self.refresh(job.id)
                except JobNotFound:
                    raise
                except LaunchpadError as e:
                    if on_error:
                        on_error(job.id, e)
                    job = self.db.job(job.id)
            jobs.append(job)
        ids = [j.id for j in jobs]
        spans, events = self.db.instances_for(ids), self.db.events_for(ids)
        now = time.time()
        rows = []
        for job in jobs:
            row = job.to_json()
            mine = spans.get(job.id, [])
            row["cost_usd"] = round(cost_of(mine, now), 4)
            # the block volumes bill while an instance is stopped too
            row["disk_usd"] = round(disk_usd_so_far([s.as_tuple() for s in mine], now=now), 4)
            evs = events.get(job.id, [])
            row.update(status_fields(evs))  # the preflight's figures and warnings
            row["phase_times"] = phase_times(evs)
            live = [s.instance for s in mine if s.instance.state is not InstanceState.TERMINATED]
            if mine:
                row["estimate_usd"] = plan_estimate(job.plan, mine[-1].instance.offer)
                row["gpu"] = gpu_label(mine[-1].instance.offer)
            if live and not job.state.finished:
                inst = live[-1]
                try:
                    p = self.provider(inst.provider).progress(inst)
                    row.update(phase=p.phase, tokens_per_s=p.tokens_per_s, heartbeat=p.heartbeat,
                               losses=[list(x) for x in p.losses], eval_losses=[list(x) for x in p.eval_losses],
                               step_seconds=p.step_seconds, eval_loss=p.eval_losses[-1][1] if p.eval_losses else None)
                    if p.step > (row.get("step") or 0):  # fresher than the last refresh recorded
                        row.update(step=p.step, loss=p.loss if p.loss is not None else row.get("loss"))
                    if p.total_steps and not row.get("total_steps"):  # not refreshed yet (refresh=False)
                        row["total_steps"] = p.total_steps
                    row["trainer_running"] = p.running
                except Exception:  # status shows what it can even when a provider is unreachable
                    row["phase"] = "unknown"
                row.update(forecast(row, sum(s.price_per_hour or 0 for s in mine if s.ended_at is None)))
            rows.append(row)
        return rows


def gpu_label(offer: Any) -> str | None:
    """``8x H100 80GB`` (per instance), ``CPU`` for an offer without one, None when not known."""
    if offer is None:
        return None
    if not offer.gpu:
        return "CPU"
    memory = f" {offer.gpu_memory_gb:g}GB" if offer.gpu_memory_gb else ""
    return f"{offer.gpu_count or 1}x {offer.gpu}{memory}"


def plan_estimate(plan: list[dict[str, Any]] | None, offer: Any) -> float | None:
    """The plan's estimated total (USD) for the offer the job runs on, or None when it was not planned."""
    if not plan or offer is None:
        return None
    for entry in plan:
        o = entry.get("offer") or {}
        if (o.get("provider"), o.get("instance_type"), o.get("region")) == (offer.provider, offer.instance_type, offer.region):
            cost = entry.get("est_cost")
            return round(float(cost), 4) if isinstance(cost, (int, float)) else None
    return None


def forecast(row: dict[str, Any], price_per_hour: float) -> dict[str, Any]:
    """ETA to the last step at the measured step time, and the cost it projects: what has billed so far
    plus the remaining time at the live instances' price."""
    step, total, per_step = row.get("step") or 0, row.get("total_steps"), row.get("step_seconds")
    if not total or not per_step or step >= total:
        return {}
    eta = (total - step) * float(per_step)
    spent = (row.get("cost_usd") or 0) + (row.get("disk_usd") or 0)
    return {"eta_s": round(eta, 1), "projected_usd": round(spent + eta / 3600 * price_per_hour, 4)}
