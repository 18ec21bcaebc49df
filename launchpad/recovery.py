"""Keeping a job alive, and resumable from anywhere: a mixin of `launchpad.lifecycle.Lifecycle`.

**The store holds what a resume needs** (launchpad.storage.jobfiles): each attempt writes ``job.json``
beside the job's checkpoints once its store is resolved, and every transition to a finished state or
INTERRUPTED writes ``state.json``. Both are best effort, with a warning: the agent on the instance, not
this client, writes the checkpoints, so a store this client cannot write (e.g. a bucket only the
instance role may write) never fails a run the agent can still write to; only `resume --from` loses its
way in. `resume --from URI` reads ``job.json`` and imports the job under the same id (`import_from`).

**Managed recovery** (`up --recover`, `resume --recover`): the job's instance is watched after training
starts (the heartbeat every poll, the provider's status every ``STATUS_EVERY_POLLS`` polls, by the
following `up`/`resume`, or by `launchpad watch` for a detached job). A missed heartbeat alone never ends
a run: the provider's status is asked first. When the instance is PREEMPTED or vanished (TERMINATED, or
no longer listed), what is left of it is torn down, and the job is re-planned and resumed from its
newest complete checkpoint, at most ``max_restarts`` times (default 3, counted since the last `up` or
`resume` that armed recovery), going where ``strategy`` allows:

- ``anywhere`` (default): any offer but one reclaimed (spot) within the last hour;
- ``same-region``: only offers in the lost instance's provider and region (less a reclaimed offer);
- ``next-region``: any offer outside the regions the job lost instances in within the last hour.

Without `--recover`, a following `up`/`resume` still resumes after a preemption (``anywhere``, up to
MAX_AUTO_RESUMES times in that process) and `launchpad watch` leaves the job alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from .errors import AuthError, BadInput, JobBusy, JobFailed, LaunchpadError, NoFeasibleOffer, ProviderError
from .models import Instance, InstanceState, JobProgress, JobState, Offer, TeardownMode
from .ssh.hostkeys import HostKeyChanged
from .state import JobOptions

if TYPE_CHECKING:
    from .joblock import JobLocks
    from .lifecycle import Reporter
    from .provider import Provider
    from .state import JobRecord, StateDB

log = logging.getLogger("launchpad.recovery")
STRATEGIES = ("anywhere", "same-region", "next-region")
MAX_AUTO_RESUMES = 3  # preemptions survived per `up`/`resume` without --recover; the default --max-restarts
HEARTBEAT_GIVE_UP_SECONDS = 1800.0  # a following client stops waiting for a heartbeat after this (the job runs on)
LOSS_WINDOW_SECONDS = 3600.0  # a lost instance steers (and a reclaimed offer is skipped by) the next hour's attempts
SETTLE_UNKNOWN_SECONDS = 30.0  # a trainer killed by a signal: how long an API that cannot answer is asked again
SETTLE_RUNNING_SECONDS = 2.0  # ... and the pause before an API that says "running" is asked once more
_LOSSES = ("preempted", "lost")
GONE = (InstanceState.TERMINATED, InstanceState.PREEMPTED)  # the instance is no more: a loss, unless `down` did it


def check_recovery_options(max_restarts: int | None, strategy: str | None) -> None:
    """Bad input before any cloud call: one line naming the option, what is wrong and the fix."""
    if max_restarts is not None and max_restarts < 0:
        raise BadInput(f"--max-restarts {max_restarts}: must be 0 or more; give the number of recoveries to allow, "
                       "e.g. --max-restarts 3")
    if strategy is not None and strategy not in STRATEGIES:
        raise BadInput(f"--strategy {strategy}: unknown strategy; use one of {', '.join(STRATEGIES)}")


def recovery_options(base: JobOptions, recover: bool, max_restarts: int | None, strategy: str | None) -> JobOptions:
    """The job's options with the command line's recovery options (--max-restarts / --strategy imply --recover)."""
    check_recovery_options(max_restarts, strategy)
    if not (recover or max_restarts is not None or strategy is not None):
        return base
    return replace(base, recover=True, max_restarts=base.max_restarts if max_restarts is None else max_restarts,
                   strategy=strategy or base.strategy)


class RecoverySteps:
    """Mixed into `Lifecycle`, which provides what is declared here."""

    only_offer: str | None = None  # `resume --from --same-offer`: provision on this offer label or nowhere
    _missed: dict[str, float]  # job -> when its heartbeat first went missing (monotonic), while it is missing
    _missed_said: dict[str, bool]

    if TYPE_CHECKING:
        db: StateDB
        locks: JobLocks
        reporter: Reporter
        _auto_resumes: dict[str, int]

        def provider(self, name: str) -> Provider: ...
        def refresh(self, job_id: str) -> JobRecord: ...
        def resume(self, job_id: str, *, detach: bool = False) -> JobRecord: ...
        def _event(self, job_id: str, kind: str, **data: Any) -> None: ...
        def _transition(self, job_id: str, state: JobState, **data: Any) -> None: ...
        def _best_effort(self, fn: Any, *args: Any, **kwargs: Any) -> None: ...

    # -- options ---------------------------------------------------------------------------------------
    def options(self, job_id: str) -> JobOptions:
        """The job's options, as the newest `up`/`resume` that armed recovery left them."""
        job = self.db.job(job_id)
        armed = [e for e in self.db.events(job.id) if e["kind"] == "recover:armed"]
        if not armed:
            return job.options
        fields = {k: v for k, v in armed[-1]["data"].items() if k in ("recover", "max_restarts", "strategy")}
        return replace(job.options, **fields)

    def arm_recovery(self, job_id: str, options: JobOptions) -> None:
        """Record the recovery options of this `up`/`resume` (the restart budget starts afresh)."""
        if options.recover:
            self.db.add_event(job_id, "recover:armed", {"recover": True, "max_restarts": options.max_restarts,
                                                         "strategy": options.strategy})

    def restarts_used(self, job_id: str) -> int:
        events = list(self.db.events(job_id))
        armed = max((e["seq"] for e in events if e["kind"] == "recover:armed"), default=0)
        return sum(1 for e in events if e["kind"] == "auto-resume" and e["seq"] > armed)

    # -- the job's files in its store ------------------------------------------------------------------
    def _write_job_file(self, job: JobRecord, checkpoint_uri: str, instance: Instance) -> None:
        from .storage import open_store
        from .storage.jobfiles import write_job

        options = self.options(job.id)
        doc = {"spec": job.spec.replace(checkpoint_uri=checkpoint_uri).to_json(), "recipe_text": job.recipe_text,
               "recipe_path": job.recipe_path, "name": job.name, "options": asdict(options),
               "offer": instance.offer.label if instance.offer else None, "created_at": job.created_at}
        try:
            write_job(open_store(checkpoint_uri), job.id, doc)
        except Exception as e:  # best effort: the agent, not this client, writes the checkpoints
            self.reporter.warn(f"cannot write job.json to {checkpoint_uri}/{job.id} ({e}): the run goes on, but "
                               f"`launchpad resume --from` will not find this job there; `launchpad resume {job.id}` "
                               "from this machine still works")

    def _write_state_file(self, job_id: str, state: JobState, data: dict[str, Any]) -> None:
        if not (state.finished or state is JobState.INTERRUPTED):
            return
        try:
            from .storage import open_store
            from .storage.jobfiles import write_state

            job = self.db.job(job_id)
            if job.spec.checkpoint_uri:
                write_state(open_store(job.spec.checkpoint_uri), job_id, state.value,
                            **{"error": job.error, **{k: v for k, v in data.items() if k in ("error", "by", "checkpoint")}})
        except Exception as e:  # a hint for other machines, never worth failing a transition for
            # a failed job's own error comes first; the store being gone is usually why it failed
            log.log(logging.INFO if state is JobState.FAILED else logging.WARNING,
                    "%s: cannot write state.json: %s", job_id, e)

    # -- resume --from ---------------------------------------------------------------------------------
    def import_from(self, uri: str) -> str:
        """Make the job at `uri` (<checkpoint.uri>/<job-id>) known here, INTERRUPTED; its id. Idempotent."""
        from .errors import JobNotFound
        from .jobspec import JobSpec
        from .storage import open_store
        from .storage.jobfiles import read_job, split_job_uri

        try:
            root, job_id = split_job_uri(uri)
        except ValueError as e:
            raise BadInput(f"--from {uri}: {e}; give the job's folder, e.g. s3://bucket/checkpoints/JOB") from None
        try:
            if self.db.job(job_id).id == job_id:
                return job_id  # known here already: `--from` just resumes it
        except JobNotFound:
            pass
        try:
            store = open_store(root)
        except LaunchpadError as e:
            raise BadInput(f"--from {uri}: cannot open the store ({e}); check the URI and this machine's "
                           "credentials for it") from None
        doc = read_job(store, job_id)
        if doc is None or not isinstance(doc.get("spec"), dict):
            raise BadInput(f"no job.json at {uri}: not a launchpad job folder, or written by an older version")
        try:
            spec = JobSpec.from_json(doc["spec"], source=f"{uri}/job.json")
        except (BadInput, ValueError, TypeError, KeyError) as e:
            raise BadInput(f"{uri}/job.json is not readable by this version ({str(e).splitlines()[0]}); "
                           "resume it with the launchpad version that wrote it") from None
        if spec.job_id != job_id:
            raise BadInput(f"--from {uri}: its job.json names job {spec.job_id}; give that job's folder instead")
        opts = doc.get("options") or {}
        known = {k: opts[k] for k in ("only_provider", "minimize", "recover", "max_restarts", "strategy") if k in opts}
        self.db.create_job(doc.get("name") or spec.job_id, doc.get("recipe_path"), spec.replace(checkpoint_uri=root),
                           doc.get("recipe_text") or "", JobOptions(**known))
        self.db.add_event(job_id, "imported", {"from": uri, "offer": doc.get("offer")})
        self.db.set_state(job_id, JobState.INTERRUPTED, error=f"imported from {uri}")
        return job_id

    def recorded_offer(self, job_id: str) -> str | None:
        """The offer label the job last ran on (provisioned here, or recorded in the job.json it came from)."""
        for e in reversed(list(self.db.events(job_id))):
            if e["kind"] in ("provision:ok", "imported") and e["data"].get("offer"):
                return str(e["data"]["offer"])
        return None

    def _restrict_plan(self, planned: Any) -> Any:
        """`--same-offer`: only the recorded offer, or a clear failure naming it."""
        if not self.only_offer:
            return planned
        same = tuple(r for r in planned.ranked if r.offer.label == self.only_offer)
        if not same:
            raise NoFeasibleOffer(f"--same-offer: {self.only_offer} is no longer offered (or no longer fits the job); "
                                  "drop --same-offer to re-plan on the offers there are now")
        return replace(planned, ranked=same)

    # -- losing an instance ----------------------------------------------------------------------------
    def _loss_event(self, job_id: str, instance: Instance, kind: str) -> None:
        offer = instance.offer
        self._event(job_id, kind, instance=instance.id, offer=offer.label if offer else None,
                    provider=instance.provider, region=offer.region if offer else None)

    def _record_loss(self, job_id: str, instance: Instance, state: InstanceState) -> None:
        """The job's instance is PREEMPTED or gone while it trains: record it, tear down what is left
        (a multi-node job's other machines), and mark the job INTERRUPTED by a loss."""
        self.db.set_instance_state(instance, state)
        self._loss_event(job_id, instance, "preempted" if state is InstanceState.PREEMPTED else "lost")
        self._transition(job_id, JobState.INTERRUPTED, error=f"instance {instance.id} was {state.value}", lost=True)
        self._best_effort(self.provider(instance.provider).teardown, instance, TeardownMode.TERMINATE)

    def _recovery_blockers(self, job_id: str, events: list[dict[str, Any]]) -> list[Callable[[Offer], bool]]:
        """What the job's recent losses rule out for its next attempt, by its strategy."""
        recent = [e for e in events if e["kind"] in _LOSSES and e["ts"] > time.time() - LOSS_WINDOW_SECONDS]
        blocked: list[Callable[[Offer], bool]] = []
        options = self.options(job_id)
        where = [(e["data"].get("provider"), e["data"].get("region")) for e in recent if e["data"].get("region")]
        if options.recover and where and options.strategy == "same-region":
            last = where[-1]
            blocked.append(lambda o: (o.provider, o.region) != last)
        elif options.recover and where and options.strategy == "next-region":
            lost = set(where)
            blocked.append(lambda o: (o.provider, o.region) in lost)
        return blocked

    def _reclaimed_offers(self, events: list[dict[str, Any]]) -> set[str]:
        """Offers that reclaimed the job recently: tried last (never skipped, when nothing else fits it
        is still the best place to go, as on a one-offer provider)."""
        recent = [e for e in events if e["kind"] == "preempted" and e["ts"] > time.time() - LOSS_WINDOW_SECONDS]
        return {e["data"].get("offer") for e in recent}

    def _auto_resume(self, job_id: str, reason: str, error: JobFailed | None = None) -> JobRecord:
        """Keep the job alive through a lost instance: resume on an offer its strategy allows, a bounded
        number of times (`--max-restarts` with --recover; MAX_AUTO_RESUMES per process without)."""
        options = self.options(job_id)
        n = self.restarts_used(job_id) if options.recover else self._auto_resumes.get(job_id, 0)
        limit = options.max_restarts if options.recover else MAX_AUTO_RESUMES
        if n >= limit:
            self._event(job_id, "recover:gave-up", restarts=n)
            raise error or JobFailed(f"{job_id}: {reason}; gave up after {n} automatic resumes; "
                                     f"`launchpad resume {job_id}` continues from the newest complete checkpoint")
        self._auto_resumes[job_id] = n + 1
        self._event(job_id, "auto-resume", reason=reason, attempt=n + 1, strategy=options.strategy)
        self.reporter.warn(f"{job_id}: {reason}; resuming automatically ({n + 1}/{limit}"
                           f"{', ' + options.strategy if options.recover else ''})")
        return self.resume(job_id)

    # -- a missed heartbeat -----------------------------------------------------------------------------
    def _instance_state(self, provider: Provider, instance: Instance) -> InstanceState:
        """The provider's word on the instance; UNKNOWN when it cannot be asked right now (an SSH host
        that does not answer): never gone on a guess, and never a reason to end a healthy run."""
        try:
            return provider.status(instance)
        except (AuthError, HostKeyChanged):
            raise
        except ProviderError as e:
            log.warning("%s: cannot ask for its state now: %s", instance.id, e)
            return InstanceState.UNKNOWN

    def _settled_state(self, provider: Provider, instance: Instance, progress: JobProgress | None,
                       state: InstanceState) -> InstanceState:
        """`state`, asked again when the trainer was killed by a signal but the instance is not known to be
        gone: from the client, a reclaimed machine looks exactly like that, and one answer decides between
        resuming by itself and stopping for the user. An API that could not answer (UNKNOWN: a network blip,
        a 503) is asked with back-off for up to SETTLE_UNKNOWN_SECONDS; one that says the instance runs is
        asked once more after SETTLE_RUNNING_SECONDS, as a cloud can record the reclaim a moment after the
        processes on it died."""
        code = progress.exit_code if progress is not None and not progress.running else None
        if code is None or code >= 0 or state in GONE:
            return state
        if state is not InstanceState.UNKNOWN:
            time.sleep(SETTLE_RUNNING_SECONDS)
            return self._instance_state(provider, instance)
        deadline, delay = time.monotonic() + SETTLE_UNKNOWN_SECONDS, 1.0
        while state is InstanceState.UNKNOWN and time.monotonic() + delay <= deadline:
            time.sleep(delay)
            delay = min(2 * delay, 8.0)
            state = self._instance_state(provider, instance)
        return state

    def _heartbeat(self, job_id: str, provider: Provider, instance: Instance) -> JobProgress | None:
        """The agent's heartbeat, or None when it cannot be read now while the instance is not known to be
        gone (a network blip): the run goes on and is asked again. Gives up after HEARTBEAT_GIVE_UP_SECONDS."""
        try:
            progress = provider.progress(instance)
        except LaunchpadError as e:
            since = self._missed.setdefault(job_id, time.monotonic())
            if time.monotonic() - since > HEARTBEAT_GIVE_UP_SECONDS:
                raise
            if not self._missed_said.get(job_id):
                self._missed_said[job_id] = True
                self._event(job_id, "heartbeat:missed", instance=instance.id, error=str(e))
                self.reporter.warn(f"{job_id}: no heartbeat from {instance.id} ({e}); it is not known to be gone, "
                                   "so the run goes on: asking again")
            return None
        if self._missed.pop(job_id, None) is not None:
            self._missed_said.pop(job_id, None)
            self._event(job_id, "heartbeat:back", instance=instance.id)
            self.reporter.info(f"{job_id}: the heartbeat of {instance.id} is back")
        return progress

    # -- launchpad watch -------------------------------------------------------------------------------
    def watch_pass(self) -> list[dict[str, Any]]:
        """One pass of `launchpad watch` over the jobs with --recover: refresh each TRAINING one, and
        recover each whose instance is gone (and each left INTERRUPTED by a loss with restarts left).
        A job another process is running (a following `up`) is that process's to recover."""
        actions = []
        for job in self.db.jobs():
            if not self.options(job.id).recover or job.state not in (JobState.TRAINING, JobState.INTERRUPTED):
                continue
            try:
                action = self._watch_one(job.id)
            except JobBusy:
                action = {"action": "busy", "detail": "another launchpad process runs it"}
            except LaunchpadError as e:
                action = {"action": "error", "detail": str(e)}
            if action:
                action = {"job": job.id, **action, "state": self.db.job(job.id).state.value}
                self._best_effort(self.db.add_event, job.id, f"watch:{action['action']}", {"detail": action.get("detail")})
                actions.append(action)
        return actions

    def _watch_one(self, job_id: str) -> dict[str, Any] | None:
        with self.locks.attempt(job_id):
            job = self.refresh(job_id)
            if job.state in (JobState.SUCCEEDED, JobState.FAILED):
                return {"action": "finished", "detail": job.error or ""}
            if job.state is JobState.TRAINING:
                return None  # healthy (or its instance unreachable but still there: never called gone)
            if not self._lost(job_id):
                return None  # interrupted by the user, `down` or the trainer: not ours to restart
            options, used = self.options(job_id), self.restarts_used(job_id)
            if used >= options.max_restarts:
                events = list(self.db.events(job_id))
                last_loss = max(e["seq"] for e in events if e["kind"] in _LOSSES)
                if any(e["kind"] == "recover:gave-up" and e["seq"] > last_loss for e in events):
                    return None
                self._event(job_id, "recover:gave-up", restarts=used)
                return {"action": "gave-up", "detail": f"{used} restarts used of {options.max_restarts}"}
            self._event(job_id, "auto-resume", reason=job.error, attempt=used + 1, strategy=options.strategy)
            try:
                resumed = self.resume(job_id, detach=True)
            except LaunchpadError as e:
                return {"action": "failed", "detail": str(e)}
            inst = self.db.instances(job_id, live_only=True)
            return {"action": "recovered", "detail": f"restart {used + 1}/{options.max_restarts} ({options.strategy})",
                    "instance": inst[-1].id if inst else None, "resumed_state": resumed.state.value}

    def _lost(self, job_id: str) -> bool:
        """Is the job INTERRUPTED because it lost its instance (not by Ctrl-C, `down` or its trainer)?"""
        last = [e for e in self.db.events(job_id) if e["kind"] == "state:INTERRUPTED"]
        return bool(last) and bool(last[-1]["data"].get("lost"))
