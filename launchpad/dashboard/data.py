"""What the dashboard shows, read the way `launchpad status` reads it and written nowhere.

The state is opened read-only (the database refuses writes: launchpad.state `readonly`), jobs are not
refreshed (`status_rows(refresh=False)`: a refresh records what the provider says), and the store is only
listed and read. A live job's figures come from its instance (the provider's `progress` and `logs`); a
finished one's curve from the trainer_state.json of its newest complete checkpoint, as `status JOB` does.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Any

#: lines of the trainer's log a job's page shows
LOG_TAIL = 80
#: newest events a job's page shows
EVENTS = 40
#: the curves are shown in full by the page; the job list leaves them out (it is fetched every refresh)
_CURVES = ("losses", "eval_losses")


class DashboardData:
    """The dashboard's reads, one at a time (a provider's client need not be thread-safe; the page is
    for one person). The store is read again for a job only when its last checkpoint changed."""

    def __init__(self) -> None:
        from ..lifecycle import Lifecycle, SilentReporter
        from ..plugins import provider_for
        from ..state import StateDB

        self.db = StateDB.open(readonly=True)
        self._lc = Lifecycle(self.db, {}, {}, SilentReporter(), provider_factory=provider_for)
        self._lock = threading.Lock()
        self._store_cache: dict[str, tuple[tuple, dict[str, Any]]] = {}

    def close(self) -> None:
        self.db.close()

    def jobs(self) -> dict[str, Any]:
        """Every job (newest first), each as `launchpad status --json` shows it, without its curves."""
        with self._lock:
            rows = self._lc.status_rows(refresh=False)
        rows.sort(key=lambda r: r.get("created_at") or 0, reverse=True)
        return clean({"jobs": [{k: v for k, v in r.items() if k not in _CURVES} for r in rows],
                      "state": self.db.where, "now": time.time()})

    def job(self, job_id: str) -> dict[str, Any]:
        """One job: its row with the loss and eval-loss curves, the complete checkpoints in its store, its
        newest events and the tail of its log. Raises JobNotFound."""
        with self._lock:
            (row,) = self._lc.status_rows(job_id, refresh=False)
            row.update(self._from_store(row))
            events = list(self.db.events(row["id"]))[-EVENTS:]
            row["events"] = [{"ts": e["ts"], "kind": e["kind"], "data": e["data"]} for e in events]
            row["log_tail"] = self._log_tail(row["id"])
        return clean(row)

    def _from_store(self, row: dict[str, Any]) -> dict[str, Any]:
        from ..cli._progress_view import from_store

        key = (row.get("last_checkpoint"), bool(row.get("losses")), row.get("state"))
        cached = self._store_cache.get(row["id"])
        if cached and cached[0] == key:
            return cached[1]
        uri = self.db.job(row["id"]).spec.checkpoint_uri
        found = from_store(row, uri)
        found["checkpoints"] = _checkpoints(uri, row["id"])
        self._store_cache[row["id"]] = (key, found)
        return found

    def _log_tail(self, job_id: str) -> list[str]:
        try:
            return list(deque(self._lc.logs(job_id, follow=False), maxlen=LOG_TAIL))
        except Exception as e:  # a view: an unreachable instance leaves a line saying so, not an error page
            return [f"(the log cannot be read from here: {e})"]


def _checkpoints(uri: str | None, job_id: str) -> list[dict[str, Any]]:
    """The job's complete checkpoints in its store, newest first ([] when the store cannot be read here)."""
    if not uri:
        return []
    try:
        from ..storage import open_store
        from ..storage.checkpoints import list_checkpoints

        refs = list_checkpoints(open_store(uri), job_id)
    except Exception:
        return []
    return [{"step": r.step, "uri": r.uri, "created_at": r.created_at} for r in sorted(refs, key=lambda r: -r.step)]


def clean(value: Any) -> Any:
    """`value` with every NaN or infinity as None (a diverged run logs loss=nan; JSON has no NaN and the
    browser's JSON.parse refuses it)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value
