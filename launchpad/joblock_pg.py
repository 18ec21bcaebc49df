"""`JobLocks` for state kept in PostgreSQL: the same two locks per job (see launchpad.joblock), as
PostgreSQL advisory locks, because processes on different machines (laptops, CI, a reaper CronJob) share
the jobs and a flock only reaches one machine.

Each lock lives in its own database session (connection): the server releases it when the session ends,
so a process that dies, or whose machine does, never leaves a job locked. The attempt lock's connection
stays open as long as the attempt; TCP keepalives make a vanished client's session end within minutes.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .errors import JobBusy, StateError
from .joblock import JobLocks
from .state_pg import connect, psycopg_module, safe_url, scrub

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import DictRow

_HELD = (
    "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    # a bigint key is stored as classid = its high 32 bits, objid = its low 32 bits, objsubid = 1
    " AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1) AS held"
)


def lock_key(kind: str, job_id: str) -> int:
    """The advisory lock's bigint key for one lock of one job (a 64-bit hash: a collision is negligible)."""
    digest = hashlib.blake2b(f"launchpad:{kind}:{job_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _release(conn: Any) -> None:
    """Unlock, then close. Closing alone also releases the locks, but only once the server has noticed the
    closed socket: a moment in which another process would still find the job locked."""
    try:
        conn.execute("SELECT pg_advisory_unlock_all()")
    except Exception:  # a lost connection: its session (and lock) ends with it anyway
        pass
    conn.close()


class PgJobLocks(JobLocks):
    def __init__(self, url: str):  # JobLocks.__init__ is not called: there is no lock folder
        self.url = url
        self._held: dict[str, tuple[Any, int]] = {}  # job -> (connection, depth)
        self._mutex = threading.Lock()
        self._query: psycopg.Connection[DictRow] | None = None  # for attempt_held, opened on first use
        self._psycopg = psycopg_module()

    def _error(self, e: Exception) -> StateError:
        return StateError(f"job locks on {safe_url(self.url)}: {scrub(str(e), self.url)}")

    @contextmanager
    def attempt(self, job_id: str) -> Iterator[None]:
        """One live attempt per job on every machine. Re-entrant within this process."""
        with self._mutex:
            nested = job_id in self._held
            if nested:
                conn, depth = self._held[job_id]
                self._held[job_id] = (conn, depth + 1)
        if not nested:
            conn = connect(self.url, keepalives=True)
            try:
                row = conn.execute("SELECT pg_try_advisory_lock(%s) AS ok", (lock_key("attempt", job_id),)).fetchone()
            except self._psycopg.Error as e:
                conn.close()
                raise self._error(e) from None
            if not (row and row["ok"]):
                conn.close()
                raise JobBusy(f"{job_id} is being run by another launchpad process right now (maybe on another machine)",
                              hint=f"follow it with `launchpad logs {job_id} -f`, or stop it with `launchpad down {job_id}`")
            with self._mutex:
                self._held[job_id] = (conn, 1)
        try:
            yield
        finally:
            with self._mutex:
                conn, depth = self._held[job_id]
                if depth > 1:
                    self._held[job_id] = (conn, depth - 1)
                else:
                    del self._held[job_id]
                    _release(conn)

    def attempt_held(self, job_id: str) -> bool:
        """Whether some process on any machine holds the job's attempt lock. Reads pg_locks (it never takes
        the lock, so it never makes a concurrent `attempt` fail)."""
        with self._mutex:
            if job_id in self._held:
                return True
            key = lock_key("attempt", job_id)
            try:
                if self._query is None or self._query.closed or self._query.broken:
                    self._query = connect(self.url)
                row = self._query.execute(_HELD, ((key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF)).fetchone()
            except self._psycopg.Error as e:
                raise self._error(e) from None
            return bool(row and row["held"])

    @contextmanager
    def step(self, job_id: str, timeout: float = 900) -> Iterator[None]:
        """Exclusive with every other step of this job in any process on any machine. Waits (bounded)."""
        conn = connect(self.url)
        try:
            try:
                # lock_timeout bounds the wait of pg_advisory_lock (the server cancels it: LockNotAvailable)
                conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{max(1, int(timeout * 1000))}ms",))
                conn.execute("SELECT pg_advisory_lock(%s)", (lock_key("step", job_id),))
            except self._psycopg.errors.LockNotAvailable:
                raise JobBusy(f"{job_id}: another launchpad process held the job's lock for {timeout:.0f} s",
                              hint="try again; if it persists, that process is stuck: stop it") from None
            except self._psycopg.Error as e:
                raise self._error(e) from None
            yield
        finally:
            _release(conn)

    def close(self) -> None:
        with self._mutex:
            if self._query is not None:
                self._query.close()
                self._query = None
