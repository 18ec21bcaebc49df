"""State: jobs, instances and events. The only writer of state.

`StateDB` keeps them in one SQLite file (WAL), the embedded default; ``LAUNCHPAD_STATE_URL=postgresql://...``
keeps them in PostgreSQL for a team (`launchpad.state_pg.PostgresStateDB`, the same methods and SQL).

Every lifecycle transition is an event, so `launchpad status`/`logs` can always say what happened and
`resume` can continue from any state. Secrets never reach this file: recipes are stored as written
(``${env:NAME}`` references, not their values).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import BadInput, JobNotFound, StateError
from .jobspec import JobSpec
from .models import Instance, InstanceState, JobState

if TYPE_CHECKING:
    from .joblock import JobLocks

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    provider TEXT,
    recipe_path TEXT,
    recipe_json TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    plan_json TEXT,
    step INTEGER DEFAULT 0,
    total_steps INTEGER,
    loss REAL,
    last_checkpoint TEXT,
    cost_usd REAL DEFAULT 0,
    error TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS instances (
    id TEXT NOT NULL,
    provider TEXT NOT NULL,
    job_id TEXT NOT NULL,
    state TEXT NOT NULL,
    price_per_hour REAL DEFAULT 0,
    data_json TEXT NOT NULL,
    created_at REAL NOT NULL,
    ended_at REAL,
    PRIMARY KEY (provider, id)
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    data_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events (job_id, seq);
CREATE INDEX IF NOT EXISTS instances_job ON instances (job_id);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state);
CREATE INDEX IF NOT EXISTS jobs_created ON jobs (created_at);
"""

_JOB_FIELDS = {"state", "provider", "plan_json", "step", "total_steps", "loss", "last_checkpoint", "cost_usd", "error"}
# Columns added after the first release: added to an older state file when it is opened.
_ADDED_COLUMNS = {"jobs": (("recipe_text", "TEXT"), ("options_json", "TEXT"))}
_FINISHED = tuple(s.value for s in JobState if s.finished)
# Ids per `IN (...)` list: far below SQLite's (32766) and PostgreSQL's (65535) limits on parameters.
_CHUNK = 500


@dataclass(frozen=True)
class JobOptions:
    """How the client runs a job (never sent to the instance): `--provider` and `--minimize`."""

    only_provider: str | None = None
    minimize: str = "cost"
    recover: bool = False  # `--recover`: watched after training starts and recovered when its instance is lost
    max_restarts: int = 3  # `--max-restarts`: recoveries allowed (counted since the last `up`/`resume --recover`)
    strategy: str = "anywhere"  # `--strategy`: where a recovery may go (see launchpad.recovery)


@dataclass(frozen=True)
class JobRecord:
    """One row of the jobs table, typed. Read once per lifecycle step and passed on."""

    id: str
    name: str
    state: JobState
    spec: JobSpec
    recipe_text: str = ""
    options: JobOptions = field(default_factory=JobOptions)
    provider: str | None = None
    recipe_path: str | None = None
    plan: list[dict[str, Any]] | None = None
    step: int = 0
    total_steps: int | None = None
    loss: float | None = None
    last_checkpoint: str | None = None
    cost_usd: float = 0.0
    error: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0

    @property
    def recipe(self) -> Mapping[str, Any]:
        return self.spec.recipe

    def to_json(self) -> dict[str, Any]:
        """The job for scripts (`--json`) and the status views."""
        return {"id": self.id, "name": self.name, "state": self.state.value, "provider": self.provider,
                "step": self.step, "total_steps": self.total_steps, "loss": self.loss,
                "last_checkpoint": self.last_checkpoint, "cost_usd": self.cost_usd, "error": self.error,
                "recipe": self.recipe_path, "created_at": self.created_at, "updated_at": self.updated_at}


@dataclass(frozen=True)
class InstanceSpan:
    """An instance of a job with what it bills: compute from `created_at` until `ended_at` (None while it
    runs) at `price_per_hour`. `launchpad status` reads every shown job's spans in one query."""

    instance: Instance
    created_at: float
    ended_at: float | None
    price_per_hour: float = 0.0

    def as_tuple(self) -> tuple[Instance, float, float | None]:
        return self.instance, self.created_at, self.ended_at


def cost_of(spans: Iterable[InstanceSpan], now: float | None = None) -> float:
    """The compute the spans have billed until `now` (USD)."""
    now = now or time.time()
    return sum((s.price_per_hour or 0) * max(0.0, (s.ended_at or now) - s.created_at) / 3600 for s in spans)


class StateDB:
    """Thread-safe access to the state file. Open with `StateDB.open()` (honours LAUNCHPAD_HOME and
    LAUNCHPAD_STATE_URL). Backends differ only in `__init__`, `_tx`, `_executemany`, `close` and `job_locks`."""

    _conn: Any  # sqlite3.Connection here, psycopg's in launchpad.state_pg

    def __init__(self, path: Path, *, readonly: bool = False):
        self.path = Path(path)
        #: where the state is, for messages (never a password)
        self.where = str(self.path)
        self._lock = threading.RLock()
        #: what the user should hear about this state file (a truncated file, damaged rows): the CLI prints it
        self.warnings: list[str] = []
        if readonly:
            self._open_readonly()
            return
        if _truncated(self.path):
            self.warnings.append(
                f"the state database {self.path} was empty (0 bytes, truncated?): the jobs it recorded are unknown "
                "now; `launchpad down --all` still finds and stops their instances by tag")
        try:
            from .settings import create_private_file

            create_private_file(self.path, also=("-wal", "-shm"))  # 0600 in a 0700 folder: see there
            self._conn = sqlite3.connect(str(self.path), timeout=30, check_same_thread=False, isolation_level=None)
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)
            for table, columns in _ADDED_COLUMNS.items():
                have = {r["name"] for r in self._conn.execute(f"PRAGMA table_info({table})")}
                for name, kind in columns:
                    if name not in have:
                        self._conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
        except (sqlite3.Error, OSError) as e:
            raise StateError(f"cannot open the state database {self.path}: {e}") from None

    def _open_readonly(self) -> None:
        """For viewers (`launchpad dashboard`): SQLite refuses every write on this connection, and no
        file or folder is created; a state that does not exist yet reads as one with no jobs."""
        try:
            if self.path.is_file():
                self._conn = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=30,
                                             check_same_thread=False, isolation_level=None)
            else:
                self._conn = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
                self._conn.executescript(_SCHEMA)
                for table, columns in _ADDED_COLUMNS.items():
                    for name, kind in columns:
                        self._conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")
            self._conn.row_factory = sqlite3.Row
        except sqlite3.Error as e:
            raise StateError(f"cannot open the state database {self.path}: {e}") from None

    @classmethod
    def open(cls, *, readonly: bool = False) -> StateDB:
        """The state LAUNCHPAD_STATE_URL names: sqlite:///PATH (the default, under the data dir) or
        postgresql://USER:PASSWORD@HOST:PORT/DB. `readonly`: a connection the database itself keeps from
        writing (and no schema migration), for views that must change nothing."""
        from .settings import state_url

        url = state_url()
        if url.startswith("sqlite:///"):
            return StateDB(Path(url[len("sqlite:///") :]), readonly=readonly)
        if url.startswith(("postgresql://", "postgres://")):
            from .state_pg import PostgresStateDB

            return PostgresStateDB(url, readonly=readonly)
        raise StateError(f"LAUNCHPAD_STATE_URL={url.split('@')[-1]!r}: not a state URL",
                         hint="use sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DB")

    def close(self) -> None:
        self._conn.close()

    def job_locks(self) -> JobLocks:
        """The per-job locks that go with this state: flock files on this machine (every process that
        shares a SQLite file runs here)."""
        from .joblock import JobLocks
        from .settings import data_dir

        return JobLocks(data_dir() / "locks")

    def _tx(self, sql: str, params: tuple | list = ()) -> Any:
        """One statement (autocommit); a cursor with fetchone/fetchall whose rows are read by column name."""
        with self._lock:
            try:
                return self._conn.execute(sql, params)
            except sqlite3.Error as e:
                raise StateError(f"state database {self.where}: {e}") from None

    def _executemany(self, sql: str, rows: Iterable[tuple]) -> None:
        """One statement over many rows in one transaction (bulk loads: tests and benchmarks)."""
        with self._lock:
            try:
                self._conn.execute("BEGIN")
                self._conn.executemany(sql, rows)
                self._conn.execute("COMMIT")
            except sqlite3.Error as e:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise StateError(f"state database {self.where}: {e}") from None

    # -- jobs -----------------------------------------------------------------------------------------
    def create_job(self, name: str, recipe_path: str | None, spec: JobSpec, recipe_text: str,
                   options: JobOptions | None = None) -> None:
        now = time.time()
        options = options or JobOptions()
        self._tx(
            "INSERT INTO jobs (id, name, state, recipe_path, recipe_json, spec_json, recipe_text, options_json,"
            " created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (spec.job_id, name, JobState.PENDING.value, recipe_path, json.dumps(dict(spec.recipe)),
             json.dumps(spec.to_json()), recipe_text,
             json.dumps(asdict(options)), now, now),
        )
        self.add_event(spec.job_id, "created", {"recipe": recipe_path})

    def update_spec(self, spec: JobSpec) -> None:
        """Store a changed spec (e.g. the resolved checkpoint URI, so `resume` goes back to the same store)."""
        self._tx("UPDATE jobs SET spec_json = ?, updated_at = ? WHERE id = ?",
                 (json.dumps(spec.to_json()), time.time(), spec.job_id))

    def update_job(self, job_id: str, **fields: Any) -> None:
        bad = set(fields) - _JOB_FIELDS
        if bad:
            raise ValueError(f"not job fields: {bad}")
        if "state" in fields and isinstance(fields["state"], JobState):
            fields["state"] = fields["state"].value
        sets = ", ".join(f"{k} = ?" for k in fields)
        self._tx(f"UPDATE jobs SET {sets}, updated_at = ? WHERE id = ?", (*fields.values(), time.time(), job_id))

    def set_state(self, job_id: str, state: JobState, **data: Any) -> None:
        """A lifecycle transition: the new state and an event recording it."""
        fields = {"state": state}
        if "error" in data:
            fields["error"] = data["error"]
        self.update_job(job_id, **fields)
        self.add_event(job_id, f"state:{state.value}", data)

    def job(self, job_id: str) -> JobRecord:
        """A job by id or unique id prefix or unique name. Raises JobNotFound."""
        row = self._tx("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            rows = self._tx(
                "SELECT * FROM jobs WHERE id LIKE ? ESCAPE '\\' OR name = ? ORDER BY created_at DESC",
                (job_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%", job_id),
            ).fetchall()
            if len(rows) > 1 and len({r["name"] for r in rows}) == 1 and rows[0]["name"] == job_id:
                rows = rows[:1]  # a name means its newest job
            if len(rows) != 1:
                ids = ", ".join(r["id"] for r in rows[:5])
                raise JobNotFound(
                    f"no job {job_id!r}" if not rows else f"{job_id!r} matches several jobs: {ids}",
                    hint="`launchpad status` lists jobs",
                )
            row = rows[0]
        return _job_record(row)

    def jobs(self, *, live_or_latest: int | None = None) -> list[JobRecord]:
        """Every readable job, oldest first; a damaged row is skipped with a warning (in `warnings`), never
        a crash. `live_or_latest=N`: only the jobs not finished plus the N newest finished ones (what
        `launchpad status` shows), in one query that the indexes on state and created_at keep fast."""
        if live_or_latest is None:
            rows = self._tx("SELECT * FROM jobs ORDER BY created_at, id").fetchall()
        else:
            marks = ", ".join("?" for _ in _FINISHED)
            rows = self._tx(
                f"SELECT * FROM jobs WHERE state NOT IN ({marks}) UNION ALL SELECT * FROM"
                f" (SELECT * FROM jobs WHERE state IN ({marks}) ORDER BY created_at DESC, id DESC LIMIT ?) AS latest"
                " ORDER BY created_at, id", (*_FINISHED, *_FINISHED, max(0, live_or_latest))).fetchall()
        out = []
        for r in rows:
            try:
                out.append(_job_record(r))
            except StateError as e:
                if str(e) not in self.warnings:
                    self.warnings.append(str(e))
        return out

    def count_jobs(self) -> int:
        return int(self._tx("SELECT COUNT(*) AS n FROM jobs").fetchone()["n"])

    # -- instances ------------------------------------------------------------------------------------
    def record_instance(self, instance: Instance) -> None:
        # the offer's price is per machine; a multi-node job's instance stands for all its nodes
        machines = max(1, len(instance.data.get("nodes") or []))
        price = (instance.offer.price if instance.offer else 0.0) * machines
        self._tx(
            "INSERT INTO instances (id, provider, job_id, state, price_per_hour, data_json, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (provider, id) DO UPDATE SET"
            " state = excluded.state, data_json = excluded.data_json",
            (instance.id, instance.provider, instance.job_id, instance.state.value, price,
             json.dumps(instance.to_dict()), instance.created_at or time.time()),
        )

    def set_instance_state(self, instance: Instance, state: InstanceState) -> None:
        # A stopped instance bills no compute from here on (its disk still does: `instance_spans`).
        ended = time.time() if state in (InstanceState.TERMINATED, InstanceState.PREEMPTED, InstanceState.STOPPED) else None
        self._tx(
            "UPDATE instances SET state = ?, ended_at = COALESCE(ended_at, ?) WHERE provider = ? AND id = ?",
            (state.value, ended, instance.provider, instance.id),
        )

    def instances(self, job_id: str | None = None, *, live_only: bool = False) -> list[Instance]:
        sql, params = "SELECT * FROM instances", []
        clauses = []
        if job_id:
            clauses.append("job_id = ?")
            params.append(job_id)
        if live_only:
            clauses.append("state != ?")
            params.append(InstanceState.TERMINATED.value)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        rows = self._tx(sql + " ORDER BY created_at", tuple(params)).fetchall()
        out = []
        for r in rows:
            inst = Instance.from_dict(json.loads(r["data_json"]))
            out.append(Instance(**{**inst.__dict__, "state": InstanceState(r["state"])}))
        return out

    def cost_so_far(self, job_id: str, now: float | None = None) -> float:
        return cost_of(self.instances_for([job_id]).get(job_id, []), now)

    def instance_spans(self, job_id: str) -> list[tuple[Instance, float, float | None]]:
        """(instance, created_at, ended_at) of each instance of the job; ended_at = when it stopped billing
        compute (stopped, preempted or terminated), None while it runs."""
        return [s.as_tuple() for s in self.instances_for([job_id]).get(job_id, [])]

    def instances_for(self, job_ids: Iterable[str]) -> dict[str, list[InstanceSpan]]:
        """{job id: its instances, oldest first} for many jobs in one query per 500 ids (no query per job)."""
        out: dict[str, list[InstanceSpan]] = {}
        for chunk in _chunks(job_ids):
            rows = self._tx(
                "SELECT job_id, state, price_per_hour, data_json, created_at, ended_at FROM instances"
                f" WHERE job_id IN ({', '.join('?' for _ in chunk)}) ORDER BY created_at", tuple(chunk)).fetchall()
            for r in rows:
                inst = replace(Instance.from_dict(json.loads(r["data_json"])), state=InstanceState(r["state"]))
                out.setdefault(r["job_id"], []).append(
                    InstanceSpan(inst, r["created_at"], r["ended_at"], r["price_per_hour"] or 0.0))
        return out

    # -- events ---------------------------------------------------------------------------------------
    def add_event(self, job_id: str, kind: str, data: dict | None = None) -> dict[str, Any]:
        event = {"job_id": job_id, "ts": time.time(), "kind": kind, "data": data or {}}
        self._tx(
            "INSERT INTO events (job_id, ts, kind, data_json) VALUES (?, ?, ?, ?)",
            (job_id, event["ts"], kind, json.dumps(event["data"], default=str)),
        )
        return event

    def last_event_seq(self, job_id: str, kind: str | None = None) -> int:
        """The seq of the job's newest event (of `kind`), 0 if none."""
        sql = "SELECT MAX(seq) AS m FROM events WHERE job_id = ?" + (" AND kind = ?" if kind else "")
        row = self._tx(sql, (job_id, kind) if kind else (job_id,)).fetchone()
        return int(row["m"] or 0)

    def events(self, job_id: str) -> Iterator[dict[str, Any]]:
        for r in self._tx("SELECT * FROM events WHERE job_id = ? ORDER BY seq", (job_id,)).fetchall():
            yield _event(r)

    def events_for(self, job_ids: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
        """{job id: its events in order} for many jobs in one query per 500 ids."""
        out: dict[str, list[dict[str, Any]]] = {}
        for chunk in _chunks(job_ids):
            rows = self._tx(f"SELECT * FROM events WHERE job_id IN ({', '.join('?' for _ in chunk)}) ORDER BY seq",
                            tuple(chunk)).fetchall()
            for r in rows:
                out.setdefault(r["job_id"], []).append(_event(r))
        return out


def _event(r: Any) -> dict[str, Any]:
    return {"seq": r["seq"], "ts": r["ts"], "kind": r["kind"], "data": json.loads(r["data_json"])}


def _chunks(ids: Iterable[str]) -> Iterator[list[str]]:
    ids = list(dict.fromkeys(ids))  # unique, in order
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


def _truncated(path: Path) -> bool:
    """An existing 0-byte database with no WAL content: what is left of a state file that was cut off.
    (A new database is never 0 bytes once opened: switching to WAL writes its header.)"""
    try:
        if path.stat().st_size != 0:
            return False
    except FileNotFoundError:
        return False
    wal = path.with_name(path.name + "-wal")
    return not (wal.exists() and wal.stat().st_size > 0)


def _job_record(row: Any) -> JobRecord:
    """A row (sqlite3.Row or psycopg's dict row) as a JobRecord; StateError when it cannot be read."""
    d = dict(row)
    try:
        spec_data = json.loads(d["spec_json"])
        options = json.loads(d.get("options_json") or "null") or {
            # rows written before options_json existed kept these in the spec
            "only_provider": spec_data.get("only_provider"), "minimize": spec_data.get("minimize", "cost")}
        spec = JobSpec.from_json(spec_data, source=f"job {d['id']} in the state database")
        plan = json.loads(d["plan_json"]) if d.get("plan_json") else None
        state = JobState(d["state"])
    except (ValueError, TypeError, KeyError, BadInput) as e:
        raise StateError(f"job {d.get('id')!r} in the state database is damaged: {str(e).splitlines()[0]}",
                         hint="`launchpad down --all` still finds its instances by tag") from None
    return JobRecord(
        id=d["id"], name=d["name"], state=state, spec=spec,
        recipe_text=d.get("recipe_text") or spec_data.get("recipe_text") or "",
        options=JobOptions(only_provider=options.get("only_provider"), minimize=options.get("minimize") or "cost",
                           **{k: options[k] for k in ("recover", "max_restarts", "strategy") if k in options}),
        provider=d.get("provider"), recipe_path=d.get("recipe_path"), plan=plan, step=d.get("step") or 0,
        total_steps=d.get("total_steps"), loss=d.get("loss"), last_checkpoint=d.get("last_checkpoint"),
        cost_usd=d.get("cost_usd") or 0.0, error=d.get("error"), created_at=d["created_at"], updated_at=d["updated_at"],
    )
