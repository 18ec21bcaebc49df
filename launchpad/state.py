"""Local state: one SQLite file (WAL) with jobs, instances and events. The only writer of local state.

Every lifecycle transition is an event, so `launchpad status`/`logs` can always say what happened and
`resume` can continue from any state. Secrets never reach this file: recipes are stored as written
(``${env:NAME}`` references, not their values).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import BadInput, JobNotFound, StateError
from .jobspec import JobSpec
from .models import Instance, InstanceState, JobState

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
"""

_JOB_FIELDS = {"state", "provider", "plan_json", "step", "total_steps", "loss", "last_checkpoint", "cost_usd", "error"}
# Columns added after the first release: added to an older state file when it is opened.
_ADDED_COLUMNS = {"jobs": (("recipe_text", "TEXT"), ("options_json", "TEXT"))}


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


class StateDB:
    """Thread-safe access to the state file. Open with `StateDB.open()` (honours LAUNCHPAD_HOME)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        #: what the user should hear about this state file (a truncated file, damaged rows): the CLI prints it
        self.warnings: list[str] = []
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

    @classmethod
    def open(cls) -> StateDB:
        from .settings import state_url

        url = state_url()
        if not url.startswith("sqlite:///"):
            raise StateError(f"LAUNCHPAD_STATE_URL={url.split('@')[-1]!r}: only sqlite:/// is supported in this version")
        return cls(Path(url[len("sqlite:///") :]))

    def close(self) -> None:
        self._conn.close()

    def _tx(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            try:
                return self._conn.execute(sql, params)
            except sqlite3.Error as e:
                raise StateError(f"state database {self.path}: {e}") from None

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

    def jobs(self) -> list[JobRecord]:
        """Every readable job; a damaged row is skipped with a warning (in `warnings`), never a crash."""
        out = []
        for r in self._tx("SELECT * FROM jobs ORDER BY created_at").fetchall():
            try:
                out.append(_job_record(r))
            except StateError as e:
                if str(e) not in self.warnings:
                    self.warnings.append(str(e))
        return out

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
        now = now or time.time()
        rows = self._tx("SELECT price_per_hour, created_at, ended_at FROM instances WHERE job_id = ?", (job_id,))
        return sum((r["price_per_hour"] or 0) * max(0.0, ((r["ended_at"] or now) - r["created_at"])) / 3600 for r in rows)

    def instance_spans(self, job_id: str) -> list[tuple[Instance, float, float | None]]:
        """(instance, created_at, ended_at) of each instance of the job; ended_at = when it stopped billing
        compute (stopped, preempted or terminated), None while it runs."""
        rows = self._tx("SELECT state, data_json, created_at, ended_at FROM instances WHERE job_id = ? ORDER BY created_at",
                        (job_id,)).fetchall()
        return [(replace(Instance.from_dict(json.loads(r["data_json"])), state=InstanceState(r["state"])),
                 r["created_at"], r["ended_at"]) for r in rows]

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
        sql = "SELECT MAX(seq) FROM events WHERE job_id = ?" + (" AND kind = ?" if kind else "")
        row = self._tx(sql, (job_id, kind) if kind else (job_id,)).fetchone()
        return int(row[0] or 0)

    def events(self, job_id: str) -> Iterator[dict[str, Any]]:
        for r in self._tx("SELECT * FROM events WHERE job_id = ? ORDER BY seq", (job_id,)).fetchall():
            yield {"seq": r["seq"], "ts": r["ts"], "kind": r["kind"], "data": json.loads(r["data_json"])}


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


def _job_record(row: sqlite3.Row) -> JobRecord:
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
