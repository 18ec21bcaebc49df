"""`launchpad reap`: find every launchpad-tagged instance on every configured provider and apply the
idle/orphan policy, so nothing bills after its job is over, even when the laptop that ran it is gone.

One pass lists each provider's `instances()` concurrently (the AWS provider lists its regions
concurrently too), then looks at each instance's job where it can be seen: the state DB (this machine's
or a team's), and the job's folder in its checkpoint store (``job.json``, ``state.json`` and the agent's
``heartbeat.json``, launchpad.storage.jobfiles). The store is the job's ``spec.checkpoint_uri`` when the
state DB knows the job, else ``provider.checkpoint_uri_for(instance)``.

Classes, in the order they are decided (the first that fits wins):

    stopped    not running (stopped, preempted): bills no compute                          -> keep
    orphan     its job never reached training and nobody drives it any more (`up` killed)    -> terminate
    over-age   older than --max-age and a trainer is alive                                  -> checkpoint, terminate
    active     a fresh heartbeat with a trainer running or pre-warming                      -> keep
    finished   the job SUCCEEDED/FAILED (state DB, state.json) or its heartbeat says done/failed -> terminate
    orphan     torn down by `launchpad down` and still up                                   -> terminate
    starting   no job record yet, younger than --grace                                      -> keep
    orphan     no job anywhere we can see (no state DB row, no job.json), older than --grace -> terminate
    idle       no trainer for longer than its autostop window (heartbeat's idle_since)      -> its autostop action
    over-age   older than --max-age (no trainer alive)                                      -> terminate
    active     a fresh heartbeat (a trainer just ended, the window not over yet)            -> keep
    starting   no heartbeat yet and younger than --grace                                    -> keep
    active     no fresh heartbeat, but a launchpad process here drives the job (attempt lock held) -> keep
    orphan     nobody drives it: no fresh heartbeat, attempt lock free, older than --grace  -> terminate

Before an idle, over-age or undriven instance of a job that trained goes, the checkpoints a dead agent
left in its upload queue are uploaded (provider.salvage): they may be the newest, and only on that disk.

Safe defaults: nothing younger than --grace (15 min) is removed on missing evidence alone; a running
trainer is never terminated on a stale document (a fresh heartbeat saying it trains wins over a
state.json that says the job finished); an over-age instance whose trainer cannot be asked for a
checkpoint is KEPT and reported as a failure (exit 1) unless --force.

The attempt lock tells "somebody drives this job" only on the machine that runs it: with a shared state
DB (LAUNCHPAD_STATE_URL), a job driven from another machine looks undriven here unless its agent beats.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import LaunchpadError, NotYetTerminated, ProviderError
from .models import Capability, Instance, InstanceState, JobState, TeardownMode

if TYPE_CHECKING:
    from .joblock import JobLocks
    from .lifecycle import Lifecycle
    from .provider import Provider
    from .state import JobRecord, StateDB

log = logging.getLogger("launchpad.reaper")

DEFAULT_GRACE_SECONDS = 15 * 60.0
#: a heartbeat older than this says nothing about now (the agent beats every 30 s)
STALE_HEARTBEAT_SECONDS = 10 * 60.0
CHECKPOINT_TIMEOUT_SECONDS = 300.0
DEFAULT_IDLE_MINUTES = 30.0
WORKERS = 32
BUSY_PHASES = ("starting", "prewarm", "loading")  # as launchpad.agent.store_heartbeat writes them
PRE_TRAINING = (JobState.PENDING, JobState.PROVISIONING, JobState.SYNCING)
FINISHED_STATES = (JobState.SUCCEEDED.value, JobState.FAILED.value)


class ReapClass(str, enum.Enum):
    ACTIVE = "active"
    STARTING = "starting"
    IDLE = "idle"
    FINISHED = "finished"
    ORPHAN = "orphan"
    OVER_AGE = "over-age"
    STOPPED = "stopped"


@dataclass(frozen=True)
class ReapPolicy:
    grace: float = DEFAULT_GRACE_SECONDS
    max_age: float | None = None
    stale_heartbeat: float = STALE_HEARTBEAT_SECONDS
    dry_run: bool = False
    force: bool = False  # over-age: terminate even when no checkpoint could be saved first
    checkpoint_timeout: float = CHECKPOINT_TIMEOUT_SECONDS


@dataclass(frozen=True)
class Evidence:
    """What one pass could see of an instance's job."""

    record: JobRecord | None = None
    torn_down: bool = False  # `down` ran after the job's last attempt, or the DB has this instance terminated
    store_uri: str | None = None
    store_note: str | None = None  # why the store was not read
    job_doc: Mapping[str, Any] | None = None
    store_state: Mapping[str, Any] | None = None
    heartbeat: Mapping[str, Any] | None = None
    attempt_held: bool = False


@dataclass(frozen=True)
class ReapDecision:
    instance: Instance
    klass: ReapClass
    action: str  # keep | stop | terminate
    reason: str
    age: float | None = None
    heartbeat_age: float | None = None
    checkpoint_first: bool = False
    salvage_first: bool = False  # no agent alive: upload what a dead one left on the disk (provider.salvage)
    job_known: bool = False  # the state DB has the job: events and instance states are recorded there
    result: str = ""
    ok: bool = True  # False: it should go and could not be torn down

    @property
    def region(self) -> str | None:
        region = self.instance.data.get("region")
        return str(region) if region else (self.instance.offer.region if self.instance.offer else None)

    def to_dict(self) -> dict[str, Any]:
        return {"instance": self.instance.id, "provider": self.instance.provider, "region": self.region,
                "job": self.instance.job_id, "class": self.klass.value, "reason": self.reason,
                "age_s": _round(self.age), "heartbeat_age_s": _round(self.heartbeat_age),
                "action": self.action, "checkpoint_first": self.checkpoint_first,
                "salvage_first": self.salvage_first, "result": self.result,
                "ok": self.ok}


@dataclass(frozen=True)
class ReapReport:
    decisions: tuple[ReapDecision, ...] = ()
    errors: tuple[str, ...] = ()  # providers that could not be listed
    seconds: float = 0.0
    dry_run: bool = False
    failed: tuple[ReapDecision, ...] = field(default=())

    def to_json(self) -> list[dict[str, Any]]:
        return [d.to_dict() for d in self.decisions]


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 1)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


# -- classification (pure) --------------------------------------------------------------------------------
def classify(instance: Instance, ev: Evidence, policy: ReapPolicy, now: float,
             *, can_stop: bool = True) -> ReapDecision:
    age = now - instance.created_at if instance.created_at else None
    hb = ev.heartbeat or {}
    hb_ts = _num(hb.get("ts"))
    hb_age = max(0.0, now - hb_ts) if hb_ts is not None else None
    fresh = hb_age is not None and hb_age <= policy.stale_heartbeat
    running = fresh and bool(hb.get("trainer_running"))
    busy = running or (fresh and hb.get("phase") in BUSY_PHASES)
    over_age = policy.max_age is not None and age is not None and age > policy.max_age
    young = age is not None and age < policy.grace
    known = ev.record is not None or ev.job_doc is not None

    def decide(klass: ReapClass, action: str, reason: str, checkpoint: bool = False, salvage: bool = False) -> ReapDecision:
        return ReapDecision(instance, klass, action, reason, age, hb_age, checkpoint, salvage, ev.record is not None)

    trained = bool(hb.get("step")) or (ev.record is not None and ev.record.step > 0)  # a checkpoint may be on its disk

    if instance.state in (InstanceState.STOPPED, InstanceState.TERMINATED, InstanceState.PREEMPTED):
        finished = _finished(ev)  # what its job came to, for whoever looks (e.g. from another machine)
        return decide(ReapClass.STOPPED, "keep", f"{instance.state.value}: bills no compute"
                      + (f"; {finished}" + (f" at step {hb['step']}" if hb.get("step") else "") if finished else ""))
    record_state = ev.record.state if ev.record is not None else None
    if record_state in PRE_TRAINING and not running and not ev.attempt_held:
        # the `up` that drove it is gone (killed, crashed) before it started a trainer: nothing ever will
        return decide(ReapClass.ORPHAN, "terminate",
                      f"its `up` is gone before training started (job {record_state.value}, no launchpad process "
                      f"drives it); `launchpad resume {instance.job_id}` starts it again")
    if over_age and busy:
        return decide(ReapClass.OVER_AGE, "terminate", f"older than --max-age {human_duration(policy.max_age)}, trainer alive",
                      checkpoint=running)
    if busy:
        what = f"trainer running (step {hb.get('step')})" if running else f"{hb.get('phase')}"
        return decide(ReapClass.ACTIVE, "keep", f"{what}, heartbeat {human_duration(hb_age)} ago")
    finished = _finished(ev)
    if finished:
        return decide(ReapClass.FINISHED, "terminate", finished)
    if ev.torn_down or _torn_down_in_store(ev.store_state):
        return decide(ReapClass.ORPHAN, "terminate", "its job was torn down (`launchpad down`) and it is still up")
    if not known:
        if young:
            return decide(ReapClass.STARTING, "keep", f"no job record yet, younger than --grace {human_duration(policy.grace)}")
        where = f"no job.json in {ev.store_uri}" if ev.store_uri else f"no store to look in ({ev.store_note})"
        return decide(ReapClass.ORPHAN, "terminate", f"no job anywhere: not in the state DB, {where}")
    idle_since = _num(hb.get("idle_since")) if not hb.get("trainer_running") else None
    window = _idle_minutes(hb, ev.record) * 60.0
    if idle_since is not None and now - idle_since > window:
        action = _idle_action(hb, ev.record)
        if action == "stop" and not can_stop:
            action = "terminate"
        return decide(ReapClass.IDLE, action,
                      f"no trainer for {human_duration(now - idle_since)} (autostop after {human_duration(window)})",
                      salvage=trained)
    if over_age:
        return decide(ReapClass.OVER_AGE, "terminate", f"older than --max-age {human_duration(policy.max_age)}",
                      salvage=trained)
    if fresh:
        idle = f", idle {human_duration(now - idle_since)} of {human_duration(window)}" if idle_since is not None else ""
        return decide(ReapClass.ACTIVE, "keep", f"{hb.get('phase')}, heartbeat {human_duration(hb_age)} ago{idle}")
    if young and not hb:
        return decide(ReapClass.STARTING, "keep", f"no heartbeat yet, younger than --grace {human_duration(policy.grace)}")
    if ev.attempt_held:
        return decide(ReapClass.ACTIVE, "keep", "a launchpad process here drives the job (its attempt lock is held)")
    if young:
        return decide(ReapClass.STARTING, "keep", f"younger than --grace {human_duration(policy.grace)}")
    beat = f"last heartbeat {human_duration(hb_age)} ago" if hb_age is not None else "no heartbeat"
    return decide(ReapClass.ORPHAN, "terminate", f"nobody drives its job: {beat}, no launchpad process holds it",
                  salvage=trained)


def _finished(ev: Evidence) -> str | None:
    if ev.record is not None and ev.record.state.value in FINISHED_STATES:
        return f"job {ev.record.state.value} (state DB)"
    state = (ev.store_state or {}).get("state")
    if state in FINISHED_STATES:
        return f"job {state} (state.json in the store)"
    phase = (ev.heartbeat or {}).get("phase")
    if phase in ("done", "failed"):
        return f"the agent's heartbeat says {phase}"
    return None


def _torn_down_in_store(doc: Mapping[str, Any] | None) -> bool:
    """state.json written by `down`: state TORN_DOWN, a `torn_down` flag, or INTERRUPTED with "torn down"."""
    if not doc:
        return False
    state = str(doc.get("state") or "")
    return (state.upper() in ("TORN_DOWN", "DOWN") or bool(doc.get("torn_down"))
            or (state == JobState.INTERRUPTED.value and "torn down" in str(doc.get("error") or "")))


def _idle_minutes(hb: Mapping[str, Any], record: JobRecord | None) -> float:
    minutes = _num(hb.get("autostop_idle_minutes"))
    if minutes is not None:
        return minutes
    return record.spec.autostop.seconds / 60.0 if record is not None else DEFAULT_IDLE_MINUTES


def _idle_action(hb: Mapping[str, Any], record: JobRecord | None) -> str:
    action = hb.get("autostop_action") or (record.spec.autostop.action if record is not None else "stop")
    return action if action in ("stop", "terminate") else "stop"


def human_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(max(0.0, seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m" if s < 172800 else f"{s // 86400}d"


# -- who drives a job ------------------------------------------------------------------------------------
def attempt_held(locks: JobLocks, job_id: str) -> bool:
    """Does a launchpad process hold the job's attempt lock (launchpad.joblock)? With SQLite that is a
    process on this machine (flock); with PostgreSQL, one anywhere (advisory locks): the state's locks."""
    try:
        return bool(locks.attempt_held(job_id))
    except (LaunchpadError, OSError) as e:  # cannot tell: assume driven (never reap on a failure to look)
        log.warning("reap: cannot check who drives %s: %s", job_id, e)
        return True


# -- one pass ---------------------------------------------------------------------------------------------
class Reaper:
    """One pass: `scan()` (list + classify), then `apply()` (act). `run()` does both."""

    def __init__(self, providers: Mapping[str, Provider], db: StateDB | None, policy: ReapPolicy | None = None,
                 *, lifecycle: Lifecycle | None = None, locks_root: Path | None = None,
                 clock: Callable[[], float] = time.time):
        from .settings import data_dir

        self.providers = dict(providers)
        self.db = db
        self.policy = policy or ReapPolicy()
        self.lifecycle = lifecycle
        from .joblock import JobLocks

        if locks_root is not None or db is None:
            self.locks: JobLocks = JobLocks(locks_root or data_dir() / "locks")
        else:
            self.locks = db.job_locks()
        self.clock = clock
        self._stores: dict[str, Any] = {}
        self._uris: dict[tuple[str, str | None], tuple[str | None, str | None]] = {}
        self._job_docs: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
        self._mutex = threading.Lock()

    # -- listing ---------------------------------------------------------------------------------------
    def _list(self) -> tuple[list[Instance], list[str]]:
        def one(provider: Provider) -> tuple[list[Instance], str | None]:
            try:
                return provider.instances(), None
            except Exception as e:  # one provider's trouble never hides the others' instances
                return [], f"{provider.name}: cannot list its instances: {e}"

        with ThreadPoolExecutor(max_workers=max(1, len(self.providers))) as pool:
            results = list(pool.map(one, self.providers.values()))
        found = [i for insts, _ in results for i in insts]
        return found, [err for _, err in results if err]

    # -- evidence --------------------------------------------------------------------------------------
    def _jobs(self, job_ids: set[str]) -> tuple[dict[str, JobRecord], set[str], set[tuple[str, str]]]:
        """The state DB's records of the jobs whose instances were found (not every job it ever ran: the
        pass grows with what is up, not with history); those torn down since their last attempt;
        their instances recorded gone."""
        from .errors import JobNotFound

        if self.db is None:
            return {}, set(), set()
        jobs = {}
        for job_id in sorted(job_ids):
            try:
                record = self.db.job(job_id)
            except JobNotFound:
                continue
            if record.id == job_id:  # by id only: a tag that is a prefix or a name of another job is not it
                jobs[job_id] = record
        torn = {j for j in jobs if self.db.last_event_seq(j, "down:requested") > self.db.last_event_seq(j, "attempt")}
        gone = {(i.provider, i.id) for j in jobs for i in self.db.instances(j) if i.state is InstanceState.TERMINATED}
        return jobs, torn, gone

    def _store_uri(self, provider: Provider, instance: Instance, record: JobRecord | None) -> tuple[str | None, str | None]:
        if record is not None and record.spec.checkpoint_uri:
            return record.spec.checkpoint_uri, None
        key = (provider.name, str(instance.data.get("region") or "") or None)
        with self._mutex:
            if key in self._uris:
                return self._uris[key]
        try:
            found: tuple[str | None, str | None] = (provider.checkpoint_uri_for(instance), None)
            if found[0] is None:
                found = (None, f"{provider.name} names no default store")
        except Exception as e:  # a provider that cannot say (credentials, a bucket it may not create)
            found = (None, f"{provider.name}: {e}")
        with self._mutex:
            self._uris[key] = found
        return found

    def _store_docs(self, uri: str, job_id: str, known: bool) -> tuple[Any, Any, Any]:
        """(heartbeat, state, job) of the job's folder, reading only what can change the class: a fresh
        heartbeat of a running trainer settles it (unless --max-age may apply); a job the state DB knows
        needs no job.json; for one it does not, a missing job.json makes it an orphan whatever state.json
        says (both terminate), so state.json is read only when job.json exists."""
        from .storage import open_store
        from .storage.jobfiles import read_heartbeat, read_job, read_state

        with self._mutex:
            if (uri, job_id) in self._job_docs:
                return self._job_docs[(uri, job_id)]
            store = self._stores.get(uri)
            if store is None:
                store = self._stores[uri] = open_store(uri)
        heartbeat = read_heartbeat(store, job_id)
        state = job_doc = None
        ts = _num((heartbeat or {}).get("ts"))
        settled = (heartbeat is not None and bool(heartbeat.get("trainer_running")) and ts is not None
                   and self.clock() - ts <= self.policy.stale_heartbeat and self.policy.max_age is None)
        if not settled:
            if not known:
                job_doc = read_job(store, job_id)
            if known or job_doc is not None:
                state = read_state(store, job_id)
        docs = (heartbeat, state, job_doc)
        with self._mutex:
            self._job_docs[(uri, job_id)] = docs
        return docs

    def evidence(self, instance: Instance, jobs: Mapping[str, JobRecord], torn: set[str],
                 gone: set[tuple[str, str]]) -> Evidence:
        record = jobs.get(instance.job_id)
        provider = self.providers[instance.provider]
        uri, note = self._store_uri(provider, instance, record)
        heartbeat = state = job_doc = None
        if uri and instance.job_id:
            try:
                heartbeat, state, job_doc = self._store_docs(uri, instance.job_id, record is not None)
            except LaunchpadError as e:  # an unknown scheme, a store SDK not installed here
                uri, note = None, f"{uri}: {e}"
        held = bool(instance.job_id) and attempt_held(self.locks, instance.job_id)
        return Evidence(record=record, torn_down=instance.job_id in torn or (instance.provider, instance.id) in gone,
                        store_uri=uri, store_note=note, job_doc=job_doc, store_state=state, heartbeat=heartbeat,
                        attempt_held=held)

    def scan(self) -> tuple[list[ReapDecision], list[str]]:
        instances, errors = self._list()
        try:
            jobs, torn, gone = self._jobs({i.job_id for i in instances if i.job_id})
        except LaunchpadError as e:
            errors.append(f"state DB: {e} (classifying from the stores alone)")
            jobs, torn, gone = {}, set(), set()
        now = self.clock()

        def one(inst: Instance) -> ReapDecision:
            try:
                ev = self.evidence(inst, jobs, torn, gone)
            except Exception as e:  # never guess "orphan" from a failure to look: keep it, say why
                return ReapDecision(inst, ReapClass.ACTIVE, "keep", f"could not look at its job: {e}",
                                    now - inst.created_at if inst.created_at else None, result="kept", ok=True)
            return classify(inst, ev, self.policy, now,
                            can_stop=self.providers[inst.provider].supports(Capability.STOP))

        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            decisions = list(pool.map(one, instances))
        return decisions, errors

    # -- acting ----------------------------------------------------------------------------------------
    def apply(self, decisions: list[ReapDecision]) -> list[ReapDecision]:
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            return list(pool.map(self._act, decisions))

    def _act(self, d: ReapDecision) -> ReapDecision:
        if d.action == "keep":
            return replace(d, result="kept")
        if self.policy.dry_run:
            return replace(d, result=f"dry run: would {'checkpoint, then ' if d.checkpoint_first else ''}{d.action}")
        provider = self.providers[d.instance.provider]
        notes = []
        if d.checkpoint_first:
            try:
                ref = provider.checkpoint(d.instance, timeout=self.policy.checkpoint_timeout)
                notes.append(f"checkpoint {ref.step} saved" if ref else "no checkpoint to save")
            except (LaunchpadError, NotImplementedError, OSError) as e:
                if not self.policy.force:
                    return replace(d, ok=False, result=f"kept: could not save a checkpoint first ({e}); "
                                                       "--force terminates it anyway")
                notes.append(f"no checkpoint ({e}), --force")
        if d.salvage_first:  # best effort: a failure to look never keeps it billing
            try:
                saved = provider.salvage(d.instance)
                notes += [f"uploaded {', '.join(r.name for r in saved)} left on it"] if saved else []
            except Exception as e:  # noqa: BLE001 - unreachable, a store SDK missing here, ...
                notes.append(f"could not upload what was left on it ({e})")
        mode = TeardownMode(d.action)
        if d.job_known and self.db is not None:
            _quietly(self.db.add_event, d.instance.job_id, "reap", {"instance": d.instance.id, "class": d.klass.value,
                                                                    "action": d.action, "reason": d.reason})
        try:
            if d.job_known and self.lifecycle is not None:
                self.lifecycle._teardown_instance(d.instance, mode)
            else:
                teardown_polling(provider, d.instance, mode)
        except Exception as e:  # one instance's trouble never ends the pass: reported, exit 1
            if d.job_known and self.db is not None:
                _quietly(self.db.set_instance_state, d.instance, InstanceState.UNKNOWN)
            return replace(d, ok=False, result="; ".join([*notes, f"failed: {e}"]))
        done = "stopped" if mode is TeardownMode.STOP else "terminated"
        return replace(d, result="; ".join([*notes, done]))

    def run(self) -> ReapReport:
        start = time.monotonic()
        decisions, errors = self.scan()
        decisions = self.apply(decisions)
        failed = tuple(d for d in decisions if not d.ok)
        return ReapReport(tuple(decisions), tuple(errors), time.monotonic() - start, self.policy.dry_run, failed)


def teardown_polling(provider: Provider, instance: Instance, mode: TeardownMode, *,
                     deadline_s: float | None = None, poll_s: float | None = None) -> None:
    """provider.teardown, called again while it says NotYetTerminated (as launchpad.teardown does)."""
    from .teardown import TEARDOWN_DEADLINE_SECONDS, TEARDOWN_POLL_SECONDS

    deadline = time.monotonic() + (deadline_s if deadline_s is not None else TEARDOWN_DEADLINE_SECONDS)
    while True:
        try:
            provider.teardown(instance, mode)
            return
        except NotYetTerminated:
            if time.monotonic() > deadline:
                raise
            time.sleep(poll_s if poll_s is not None else TEARDOWN_POLL_SECONDS)
        except LaunchpadError:
            raise
        except Exception as e:  # an SDK's own exception: report it as the provider's
            raise ProviderError(f"{instance.id}: {type(e).__name__}: {e}", provider=provider.name) from e


def _quietly(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except (LaunchpadError, OSError) as e:
        log.warning("reap: %s", e)
