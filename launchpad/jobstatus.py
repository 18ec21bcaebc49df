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
                    latest: int | None = None) -> list[dict[str, Any]]:
        """What `launchpad status` shows: each job (or one), reconciled with its provider first, with
        the live phase and speed when an instance runs. One unreachable provider never hides the other
        jobs: its error goes to `on_error` and its job is shown as last recorded. `latest=N` (no job_ref):
        only the jobs not finished plus the N newest finished ones.

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
            if job.state is JobState.TRAINING:  # its trainer may have ended while nobody watched
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
            if live and not job.state.finished:
                inst = live[-1]
                try:
                    p = self.provider(inst.provider).progress(inst)
                    row.update(phase=p.phase, tokens_per_s=p.tokens_per_s, heartbeat=p.heartbeat)
                except Exception:  # status shows what it can even when a provider is unreachable
                    row["phase"] = "unknown"
            rows.append(row)
        return rows
