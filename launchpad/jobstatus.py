"""What `launchpad status` shows for each job: a mixin of `launchpad.lifecycle.Lifecycle` (kept apart so
that lifecycle.py stays about driving jobs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import LaunchpadError
from .phases import phase_times
from .preflight import status_fields

if TYPE_CHECKING:
    from .models import Instance
    from .provider import Provider
    from .state import JobRecord, StateDB


class StatusRows:
    """Mixed into `Lifecycle`, which provides what is declared here."""

    if TYPE_CHECKING:
        db: StateDB

        def provider(self, name: str) -> Provider: ...
        def refresh(self, job_id: str) -> JobRecord: ...
        def _live_instance(self, job_id: str) -> Instance | None: ...

    def status_rows(self, job_ref: str | None = None, *,
                    on_error: Callable[[str, LaunchpadError], None] | None = None) -> list[dict[str, Any]]:
        """What `launchpad status` shows: each job (or one), reconciled with its provider first, with
        the live phase and speed when an instance runs. One unreachable provider never hides the other
        jobs: its error goes to `on_error` and its job is shown as last recorded."""
        from .errors import JobNotFound

        rows = []
        for job_id in [self.db.job(job_ref).id] if job_ref else [j.id for j in self.db.jobs()]:
            try:
                job = self.refresh(job_id)
            except JobNotFound:
                raise
            except LaunchpadError as e:
                if on_error:
                    on_error(job_id, e)
                job = self.db.job(job_id)
            row = job.to_json()
            row["cost_usd"] = round(self.db.cost_so_far(job_id), 4)
            events = list(self.db.events(job_id))
            row.update(status_fields(events))  # the preflight's figures and warnings
            row["phase_times"] = phase_times(events)
            inst = self._live_instance(job_id)
            if inst is not None:
                try:
                    p = self.provider(inst.provider).progress(inst)
                    row.update(phase=p.phase, tokens_per_s=p.tokens_per_s, heartbeat=p.heartbeat)
                except Exception:  # status shows what it can even when a provider is unreachable
                    row["phase"] = "unknown"
            rows.append(row)
        return rows
