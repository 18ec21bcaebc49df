"""The job state machine: PENDING -> PROVISIONING -> SYNCING -> TRAINING -> SUCCEEDED | FAILED | INTERRUPTED.

Every step is recorded before and after (events in the state DB) and is idempotent, so `resume` can
continue from any state: a live instance is reused, a provision attempt that never reported back is
retried with the same token (the provider returns the same instance), sync and train are safe to repeat.
Nothing is started that the state does not know of: an instance is recorded the moment provision returns,
and every instance is tagged with its job so `down --all` finds it even without the state file.

One job has at most one live attempt (the attempt lock, launchpad.joblock), and every step that starts
something re-checks, under the job's step lock, that `launchpad down` did not tear the job down since
the attempt began: teardown always wins (see launchpad.teardown).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from .errors import (
    AuthError,
    BadInput,
    ConfigError,
    JobFailed,
    JobStopped,
    LaunchpadError,
    NoCapacity,
    NoFeasibleOffer,
    ProviderError,
)
from .failover import blocker, duration, plan_json, top_reasons
from .joblock import JobLocks
from .jobspec import JobSpec
from .jobstatus import StatusRows
from .models import JOB_TAG, Bundle, Instance, InstanceSpec, InstanceState, JobProgress, JobState, Offer, TeardownMode
from .phases import record_agent_phases, sync_facts
from .plugins import emit_job_event
from .preflight import preflight_step
from .provider import Provider
from .recovery import GONE, RecoverySteps
from .state import JobOptions, JobRecord, StateDB
from .teardown import TeardownSteps

POLL_SECONDS = 1.0
STATUS_EVERY_POLLS = 10  # ask the provider whether the instance still exists every N polls


class Reporter(Protocol):
    """How the lifecycle talks to the user; the CLI renders it, tests can collect it."""

    def info(self, message: str) -> None: ...
    def warn(self, message: str) -> None: ...
    def progress(self, job_id: str, progress: JobProgress) -> None: ...
    def transfer(self, what: str, done: int, total: int) -> None: ...


class SilentReporter:
    def __init__(self) -> None:
        self.messages: list[str] = []

    def info(self, message: str) -> None:
        self.messages.append(message)

    warn = info

    def progress(self, job_id: str, progress: JobProgress) -> None:
        pass

    def transfer(self, what: str, done: int, total: int) -> None:
        pass


def new_job_id(name: str) -> str:
    return f"{name}-{secrets.token_hex(3)}"


class Lifecycle(TeardownSteps, StatusRows, RecoverySteps):
    strict = False  # `up --strict` / `resume --strict`: a preflight warning fails the job before training

    def __init__(self, db: StateDB, providers: Mapping[str, Provider], unavailable: Mapping[str, str] | None = None,
                 reporter: Reporter | None = None, provider_factory: Callable[[str], Provider] | None = None,
                 locks: JobLocks | None = None):
        self.db = db
        self.providers = dict(providers)
        self.unavailable = dict(unavailable or {})
        self.reporter: Reporter = reporter or SilentReporter()
        self.locks = locks or db.job_locks()  # flock files, or advisory locks with PostgreSQL
        self._provider_factory = provider_factory
        self._auto_resumes: dict[str, int] = {}
        self._missed: dict[str, float] = {}
        self._missed_said: dict[str, bool] = {}
        self._attempt_start: dict[str, int] = {}  # job -> seq of its "attempt" event in this process
        self._phases_seen: dict[str, dict[str, float]] = {}  # job -> agent phase times recorded (launchpad.phases)

    # -- helpers ---------------------------------------------------------------------------------------
    def _event(self, job_id: str, kind: str, **data: Any) -> None:
        event = self.db.add_event(job_id, kind, data)
        emit_job_event({"id": job_id}, event)

    def _transition(self, job_id: str, state: JobState, **data: Any) -> None:
        self.db.set_state(job_id, state, **data)
        self._write_state_file(job_id, state, data)  # state.json beside the checkpoints, best effort
        emit_job_event({"id": job_id, "state": state.value}, {"kind": f"state:{state.value}", "data": data})

    def provider(self, name: str) -> Provider:
        if name not in self.providers:
            if self._provider_factory is None:
                raise ProviderError(f"provider {name!r} is not available: {self.unavailable.get(name, 'not installed')}")
            self.providers[name] = self._provider_factory(name)
        return self.providers[name]

    def _torn_down(self, job_id: str) -> bool:
        """Did `launchpad down` run since this process began its attempt at the job?"""
        return self.db.last_event_seq(job_id, "down:requested") > self._attempt_start.get(job_id, 1 << 62)

    def _stop_if_torn_down(self, job_id: str, instance: Instance | None) -> None:
        """Call under the step lock before starting anything: if the job was torn down meanwhile, tear
        down what this attempt made since (a sync recreates a work directory) and stop."""
        if not self._torn_down(job_id):
            return
        if instance is not None:
            self._teardown_all([instance])
        raise self._stopped(job_id)

    @staticmethod
    def _stopped(job_id: str) -> JobStopped:
        return JobStopped(f"{job_id} was torn down by `launchpad down`; nothing of it is left running",
                          hint=f"`launchpad resume {job_id}` continues from the newest complete checkpoint")

    # -- submit / run ----------------------------------------------------------------------------------
    def submit(self, recipe, recipe_text: str, *, provider: str | None = None, max_steps: int | None = None,
               minimize: str = "cost", options: JobOptions | None = None) -> str:
        """Check the environment the recipe names and plan (before creating anything), then record a
        PENDING job. Returns its id."""
        from .recipe import resolve_env

        resolve_env(recipe, _environ())  # a missing ${env:NAME} is bad input before any provider is called
        planned = self.plan(recipe, provider=provider, minimize=minimize)
        job_id = new_job_id(recipe.name)
        # a custom DeepSpeed JSON lives on the client: the spec carries its content, not its path
        spec = JobSpec.from_recipe(job_id, recipe, max_steps=max_steps, deepspeed_config=_deepspeed_config(recipe))
        self.db.create_job(recipe.name, getattr(recipe, "source_path", None), spec, recipe_text,
                           replace(options or JobOptions(), only_provider=provider, minimize=minimize))
        self.arm_recovery(job_id, self.db.job(job_id).options)
        self.db.update_job(job_id, plan_json=plan_json(planned))
        return job_id

    def plan(self, recipe, *, provider: str | None = None, minimize: str = "cost"):
        from .planner import plan as make_plan

        if provider:
            if provider not in self.providers:
                reason = self.unavailable.get(provider, "no such provider plugin is installed")
                raise BadInput(f"--provider {provider}: not usable here: {reason}", hint="`launchpad check` lists providers")
            recipe = recipe.model_copy(update={"resources": recipe.resources.model_copy(update={"providers": [provider]})})
        planned = make_plan(recipe, self.providers, self.unavailable, minimize=minimize)
        if not planned.ranked:
            reasons = top_reasons(planned.rejected)
            raise NoFeasibleOffer(f"no offer fits {recipe.name}: " + "; ".join(reasons), rejected=list(planned.rejected))
        return planned

    def run(self, job_id: str, *, detach: bool = False) -> JobRecord:
        """Drive the job from whatever state it is in to the end (or to TRAINING with `detach`)."""
        job_id = self.db.job(job_id).id
        with self.locks.attempt(job_id):  # one live attempt per job, in any process
            outer = job_id not in self._attempt_start  # not an automatic resume inside this attempt
            if outer:
                self.db.add_event(job_id, "attempt")
                self._attempt_start[job_id] = self.db.last_event_seq(job_id, "attempt")
            try:
                return self._run(self.db.job(job_id), detach)
            finally:
                if outer:
                    self._attempt_start.pop(job_id, None)

    def _run(self, job: JobRecord, detach: bool) -> JobRecord:
        job_id, instance = job.id, None
        try:
            instance = self._ensure_instance(job)
            provider = self.provider(instance.provider)
            bundle = self._bundle(job, provider, instance)
            self._stop_if_torn_down(job_id, instance)  # cheap: no sync to a machine `down` just released
            self._transition(job_id, JobState.SYNCING, instance=instance.id)
            self.reporter.info(f"syncing the job to {instance.id}")
            provider.transfer_progress = self.reporter.transfer  # an upload bar, where the reporter draws one
            provider.sync(instance, bundle)
            self._event(job_id, "synced", instance=instance.id, **sync_facts(provider))
            # job.json: resumable from any machine (after sync: a provider's default bucket exists by then)
            self._write_job_file(job, bundle.job_spec.checkpoint_uri or "", instance)
            if hasattr(provider, "preflight"):  # multi-node: clock skew + all-reduce probe (launchpad.preflight)
                preflight_step(provider, instance, bundle, strict=self.strict, reporter=self.reporter,
                               event=lambda **data: self._event(job_id, "preflight", **data))
            with self.locks.step(job_id):
                self._stop_if_torn_down(job_id, instance)
                state = provider.status(instance)  # e.g. an SSH host whose claim was released meanwhile
                if state not in (InstanceState.RUNNING, InstanceState.PENDING):
                    raise ProviderError(f"{instance.id} is {state.value}, not running: not starting a trainer there")
                handle = provider.train(instance, bundle)
                self._transition(job_id, JobState.TRAINING, instance=instance.id, pid=handle.pid)
            self.reporter.info(f"training on {instance.id} (checkpoints to {bundle.job_spec.checkpoint_uri})")
            if detach:
                return self.db.job(job_id)
            return self.follow(job_id)
        except KeyboardInterrupt:
            self._interrupt(job_id, "interrupted by the user (Ctrl-C)")
            raise
        except JobStopped:
            raise
        except Exception as e:  # whatever failed (a provider, a full disk, a bug): nothing is left billing
            if instance is not None:
                self._teardown_all([instance])
            if isinstance(e, LaunchpadError) and self._torn_down(job_id):  # `down` took its machine away
                raise self._stopped(job_id) from None
            error = str(e) if isinstance(e, LaunchpadError) else f"{type(e).__name__}: {e}"
            self._best_effort(self._fail_unless_finished, job_id, error)
            raise

    def _fail_unless_finished(self, job_id: str, error: str) -> None:
        if not self.db.job(job_id).state.finished:
            self._transition(job_id, JobState.FAILED, error=error)

    def _bundle(self, job: JobRecord, provider: Provider, instance: Instance) -> Bundle:
        """The spec for the instance. The checkpoint store is resolved once (the recipe's, else the
        provider's default for this instance) and written back, so a later `resume` anywhere uses it."""
        from .recipe import resolve_env

        spec = job.spec
        if not spec.checkpoint_uri:
            uri = provider.checkpoint_uri_for(instance)
            if not uri:
                raise BadInput(f"{job.recipe_path or job.name}: checkpoint.uri: provider {provider.name} has no "
                               "default store; set one (s3://bucket/path)")
            spec = spec.replace(checkpoint_uri=uri)
            self.db.update_spec(spec)
        env = resolve_env(spec.recipe_model(), _environ(), source=job.recipe_path or job.name)
        return Bundle(job_spec=spec, recipe_text=job.recipe_text, env=env)

    def _ensure_instance(self, job: JobRecord) -> Instance:
        """A live instance for the job: reuse one, finish an attempt that never reported back, or fail over
        through the plan in order, blocking the scope each failure names."""
        job_id = job.id
        for inst in self.db.instances(job_id, live_only=True):
            state = self.provider(inst.provider).status(inst)
            if state in (InstanceState.RUNNING, InstanceState.PENDING):
                return inst
            if state is InstanceState.UNKNOWN:
                raise ProviderError(f"{inst.id} of {job_id} cannot be reached any more and may still be running",
                                    hint=f"fix the provider's config, or `launchpad down {job_id}`, then resume")
            self.db.set_instance_state(inst, state)
        recipe = job.spec.recipe_model()
        planned = self._restrict_plan(self.plan(recipe, provider=job.options.only_provider, minimize=job.options.minimize))
        self.db.update_job(job_id, plan_json=plan_json(planned))
        best = planned.ranked[0]
        self.reporter.info(f"plan: {len(planned.ranked)} feasible offer(s); best {best.offer.label} at "
                           f"${best.offer.price:.2f}/h, est. {duration(best.est_hours * 3600)}, ${best.est_cost:.2f}")
        self._transition(job_id, JobState.PROVISIONING)
        events = list(self.db.events(job_id))
        attempts = [e for e in events if e["kind"] == "provision:attempt"]
        pending_token = None
        if attempts and not any(e["kind"].startswith("provision:") and e["kind"] != "provision:attempt"
                                and e["seq"] > attempts[-1]["seq"] for e in events):
            pending_token = attempts[-1]["data"]  # an attempt that never reported back: same token, same instance
        # a just reclaimed offer is tried last, and a lost instance steers the job by its strategy
        blocked: list[Callable[[Offer], bool]] = self._recovery_blockers(job_id, events)
        reclaimed = self._reclaimed_offers(events)
        failures, no_store = [], []
        for ranked in sorted(planned.ranked, key=lambda r: r.offer.label in reclaimed):
            offer = ranked.offer
            if any(b(offer) for b in blocked):
                continue
            problem = None if job.spec.checkpoint_uri else self.provider(offer.provider).store_problem()
            if problem:  # nowhere to keep checkpoints: refused before anything is rented, the next provider tried
                self._event(job_id, "provision:failed", offer=offer.label, reason=problem, scope="provider")
                self.reporter.warn(f"{offer.provider}: {problem} — skipping this provider")
                failures.append(f"{offer.label}: {problem}")
                no_store.append(problem)
                blocked.append(blocker(offer, "provider"))
                continue
            if pending_token and pending_token.get("offer") == offer.label:
                token = pending_token["token"]
            else:  # random, not counted: two processes never compute the same token for different attempts
                token = f"{job_id}-{secrets.token_hex(4)}"
            self._event(job_id, "provision:attempt", offer=offer.label, token=token, price=offer.price)
            provider = self.provider(offer.provider)
            spec = InstanceSpec(
                job_id=job_id, token=token, tags={JOB_TAG: job_id}, nodes=recipe.resources.nodes,
                disk=recipe.resources.disk, autostop_idle_minutes=recipe.autostop.idle_minutes,
                autostop_action=TeardownMode(recipe.autostop.action),
                disk_gb=planned.need.disk_gb, cuda=recipe.resources.cuda,
            )
            try:
                instance = provider.provision(offer, spec)
            except (NoCapacity, AuthError) as e:
                scope = "provider" if isinstance(e, AuthError) else e.scope
                self._event(job_id, "provision:failed", offer=offer.label, reason=str(e), scope=scope)
                self.reporter.warn(f"{offer.label}: {e} — skipping this {scope}")
                failures.append(f"{offer.label}: {e}")
                blocked.append(blocker(offer, scope))
                continue
            with self.locks.step(job_id):
                self.db.record_instance(instance)
                self.db.update_job(job_id, provider=offer.provider)
                self._event(job_id, "provision:ok", offer=offer.label, instance=instance.id)
                self._stop_if_torn_down(job_id, instance)
            self.reporter.info(f"provisioned {instance.id} on {offer.label} at ${offer.price:.2f}/h")
            return instance
        if no_store and len(no_store) == len(failures):  # the recipe's to fix, not the market's: exit 2
            raise ConfigError(f"{job.recipe_path or job.name}: {no_store[0]}")
        raise NoFeasibleOffer("every offer failed: " + "; ".join(failures[-3:]) if failures else "no offer left to try")

    # -- following a running job ----------------------------------------------------------------------
    def follow(self, job_id: str) -> JobRecord:
        """Wait for the trainer, reporting progress; then finish the job. Ctrl-C interrupts it."""
        job_id = self.db.job(job_id).id
        instance = self._live_instance(job_id)
        if instance is None:
            return self.db.job(job_id)
        # following a job another command started: a `down` from now on is ours to honour
        owned = job_id not in self._attempt_start
        self._attempt_start.setdefault(job_id, self.db.last_event_seq(job_id))
        provider = self.provider(instance.provider)
        polls = 0
        try:
            while True:
                polls += 1
                if self._torn_down(job_id):
                    raise self._stopped(job_id)
                progress: JobProgress | None = None
                if polls % STATUS_EVERY_POLLS:  # else: ask the provider whether the instance still exists
                    try:
                        progress = provider.progress(instance)
                    except LaunchpadError:
                        pass  # unreachable: is the instance still there?
                if progress is None or not progress.running:  # ended: by itself, or with its machine (preempted)?
                    state = self._instance_state(provider, instance)  # UNKNOWN when the provider cannot tell
                    if progress is None and state not in GONE:
                        progress = self._heartbeat(job_id, provider, instance)  # None: missed, the instance is there
                    state = self._settled_state(provider, instance, progress, state)  # killed by a signal: ask again
                    if state in GONE:
                        with self.locks.step(job_id):
                            if self._torn_down(job_id):
                                continue  # not a preemption: `down` did it (raised at the loop's top)
                            self._record_loss(job_id, instance, state)
                        return self._auto_resume(job_id, f"instance {instance.id} was {state.value}")
                if progress is None:
                    time.sleep(POLL_SECONDS)
                    continue
                self._record_progress(job_id, progress)
                self.reporter.progress(job_id, progress)
                if not progress.running:
                    try:
                        return self._finish(job_id, instance, progress)
                    except JobFailed as e:
                        if progress.phase == "interrupted" and not self._torn_down(job_id):
                            return self._auto_resume(job_id, progress.error or "preempted", e)  # the agent saved first
                        raise
                time.sleep(POLL_SECONDS)
        except KeyboardInterrupt:
            self._interrupt(job_id, "interrupted by the user (Ctrl-C)")
            raise
        finally:
            if owned:
                self._attempt_start.pop(job_id, None)

    def refresh(self, job_id: str) -> JobRecord:
        """Reconcile a TRAINING job whose trainer may have ended while nobody watched (`up --detach`)."""
        job = self.db.job(job_id)
        job_id = job.id
        if job.state is not JobState.TRAINING:
            return job
        instance = self._live_instance(job_id)
        if instance is None:
            return job
        provider = self.provider(instance.provider)
        state = provider.status(instance)
        if state is InstanceState.UNKNOWN:
            return job  # cannot tell: never call it gone (it may still bill); status shows "unknown"
        progress = None
        if state not in GONE:
            progress = provider.progress(instance)
            self._record_progress(job_id, progress)
            state = self._settled_state(provider, instance, progress, state)  # killed by a signal: reclaimed?
        if state in GONE:
            self._record_loss(job_id, instance, state)
        elif progress is not None and not progress.running and state is not InstanceState.UNKNOWN:
            try:  # UNKNOWN after a death by a signal: asked again at the next refresh
                self._finish(job_id, instance, progress)
            except JobFailed:
                pass  # recorded in the job; status shows it
        return self.db.job(job_id)

    def _record_progress(self, job_id: str, p: JobProgress) -> None:
        fields: dict[str, Any] = {"step": p.step, "total_steps": p.total_steps}
        if p.loss is not None:
            fields["loss"] = p.loss
        if p.last_checkpoint:
            fields["last_checkpoint"] = p.last_checkpoint
        self.db.update_job(job_id, **fields)
        record_agent_phases(self.db, job_id, p.phase_times, self._phases_seen)

    def _finish(self, job_id: str, instance: Instance, p: JobProgress) -> JobRecord:
        with self.locks.step(job_id):
            job = self.db.job(job_id)
            if job.state.finished:
                return job
            return self._finish_locked(job_id, instance, p)

    def _finish_locked(self, job_id: str, instance: Instance, p: JobProgress) -> JobRecord:
        provider = self.provider(instance.provider)
        if p.exit_code == 0 and p.phase == "done":
            ref = provider.checkpoint(instance)  # blocks until the newest checkpoint's manifest is in the store
            if ref is not None:
                self.db.update_job(job_id, last_checkpoint=ref.uri)
            self._teardown_instance(instance)
            self._transition(job_id, JobState.SUCCEEDED, checkpoint=ref.uri if ref else None)
            self.db.update_job(job_id, cost_usd=self.db.cost_so_far(job_id))
            return self.db.job(job_id)
        tail = self._log_tail(instance)
        if p.exit_code is not None and p.exit_code < 0:
            self._salvage(job_id, instance)  # the agent died with it: its unsent checkpoint is on that disk
        self._teardown_instance(instance)
        self.db.update_job(job_id, cost_usd=self.db.cost_so_far(job_id))
        resume_hint = f"`launchpad resume {job_id}` continues from the newest complete checkpoint"
        if p.phase == "interrupted":  # the agent saved on a spot notice: the machine is being reclaimed
            reason = p.error or "interrupted on the instance"
            self._loss_event(job_id, instance, "preempted")
            self._transition(job_id, JobState.INTERRUPTED, error=reason, lost=True)
            raise JobFailed(f"{job_id}: {reason}; {resume_hint}", exit_code_of_trainer=p.exit_code, log_tail=tail)
        # A full disk is the cause even when the trainer had to be stopped by a signal to report it: the
        # job failed (a resume on the same disk would fail again), it was not interrupted.
        disk_full = p.phase == "failed" and (p.error or "").startswith("disk full:")
        if p.exit_code is not None and p.exit_code < 0 and not disk_full:
            reason = p.error or f"trainer was killed by signal {-p.exit_code} at step {p.step}"
            self._transition(job_id, JobState.INTERRUPTED, error=reason)
            raise JobFailed(f"{job_id}: {reason}; {resume_hint}", exit_code_of_trainer=p.exit_code, log_tail=tail)
        reason = p.error or f"trainer exited with code {p.exit_code} at step {p.step}"
        self._transition(job_id, JobState.FAILED, error=reason, exit_code=p.exit_code)
        raise JobFailed(f"{job_id}: {reason}; {resume_hint}", exit_code_of_trainer=p.exit_code, log_tail=tail)

    def _interrupt(self, job_id: str, reason: str) -> None:
        self._teardown_all(self.db.instances(job_id, live_only=True))
        if not self.db.job(job_id).state.finished:
            self._transition(job_id, JobState.INTERRUPTED, error=reason)

    # -- resume ----------------------------------------------------------------------------------------
    def resume(self, job_id: str, *, detach: bool = False) -> JobRecord:
        """Continue the job from its newest complete checkpoint, or follow it if it still trains. Holds the
        job's attempt lock throughout: a second `resume` (or `up`) of the same job is refused meanwhile."""
        job_id = self.db.job(job_id).id
        with self.locks.attempt(job_id):
            return self._resume(job_id, detach)

    def _resume(self, job_id: str, detach: bool) -> JobRecord:
        from .storage import open_store
        from .storage.checkpoints import latest_checkpoint

        job = self.refresh(job_id)
        if job.state is JobState.SUCCEEDED:
            self.reporter.info(f"{job_id} already succeeded; nothing to resume")
            return job
        instance = self._live_instance(job_id)
        if instance is not None and job.state is JobState.TRAINING:
            if self.provider(instance.provider).progress(instance).running:
                self.reporter.info(f"{job_id} is still training on {instance.id}; following it")
                return job if detach else self.follow(job_id)
        uri = job.spec.checkpoint_uri  # resolved and stored by the first sync
        ref = latest_checkpoint(open_store(uri), job_id) if uri else None
        final = job.spec.max_steps or job.total_steps
        if ref is not None and final and ref.step >= final:
            # Finished work stays finished: never train past the last step (and prune a real checkpoint).
            self.reporter.info(f"{job_id} already reached its last step ({ref.name}); nothing to resume")
            self._transition(job_id, JobState.SUCCEEDED, checkpoint=ref.uri)
            self.db.update_job(job_id, step=ref.step, last_checkpoint=ref.uri)
            return self.db.job(job_id)
        if ref is not None:
            self.reporter.info(f"resuming {job_id} from {ref.name}")
        else:
            self.reporter.info(f"resuming {job_id}: no complete checkpoint yet, starting from step 0")
        self._event(job_id, "resume", checkpoint=ref.uri if ref else None)
        return self.run(job_id, detach=detach)

    # -- status ----------------------------------------------------------------------------------------
    def _live_instance(self, job_id: str) -> Instance | None:
        live = self.db.instances(job_id, live_only=True)
        return live[-1] if live else None


def _deepspeed_config(recipe) -> dict | None:
    if not recipe.deepspeed:
        return None
    from .dsconfig import load_config

    return load_config(recipe.deepspeed)


def _environ() -> dict[str, str]:
    import os

    return dict(os.environ)
