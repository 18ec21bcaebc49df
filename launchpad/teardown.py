"""Teardown: `down`, `down --all` and tearing down one instance. Teardown always wins.

- It never depends on writing logs or state: saving the log, recording events and the final instance
  state are each best effort, and the provider's teardown runs whatever happened to them.
- `down` takes the job's step lock (launchpad.joblock) and records ``down:requested`` first, so a
  concurrent `up`/`resume` sees it at its next step and stops instead of starting a trainer on a
  machine that was just released.
- A job whose trainer already finished is reconciled first: finished work stays finished, and a
  terminal state (SUCCEEDED, FAILED) is never rewritten.
- An instance that can no longer be reached or named (its host was renamed, its provider is gone) is
  UNKNOWN, not TERMINATED: `down` says so and exits 1, and a later `down` tries again.
- `down --all` works without a readable state DB: `down_all_by_tag` finds instances by their tag.
- An instance whose agent died (a crash, `kill -9`) may hold the only copy of the newest checkpoint, in
  the agent's upload queue: the lifecycle salvages it (`_salvage`) before tearing that instance down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import LaunchpadError, NotYetTerminated, ProviderError, TeardownIncomplete
from .models import Instance, InstanceState, JobState, TeardownMode

if TYPE_CHECKING:
    from .joblock import JobLocks
    from .lifecycle import Reporter
    from .provider import Provider
    from .state import JobRecord, StateDB

log = logging.getLogger("launchpad.teardown")
TEARDOWN_POLL_SECONDS = 2.0
TEARDOWN_DEADLINE_SECONDS = 600.0


class TeardownSteps:
    """Mixed into `launchpad.lifecycle.Lifecycle`, which provides what is declared here."""

    if TYPE_CHECKING:
        db: StateDB
        providers: dict[str, Provider]
        locks: JobLocks
        reporter: Reporter

        def provider(self, name: str) -> Provider: ...
        def refresh(self, job_id: str) -> JobRecord: ...
        def _event(self, job_id: str, kind: str, **data: Any) -> None: ...
        def _transition(self, job_id: str, state: JobState, **data: Any) -> None: ...
        def _live_instance(self, job_id: str) -> Instance | None: ...

    # -- one instance ----------------------------------------------------------------------------------
    def _teardown_instance(self, instance: Instance, mode: TeardownMode = TeardownMode.TERMINATE) -> None:
        """Tear `instance` down; raises ProviderError when the provider cannot (it may still run)."""
        provider = self.provider(instance.provider)
        self._save_logs(instance)
        self._best_effort(self._event, instance.job_id, "teardown:start", instance=instance.id, mode=mode.value)
        deadline = time.monotonic() + TEARDOWN_DEADLINE_SECONDS
        while True:
            try:
                provider.teardown(instance, mode)
                break
            except NotYetTerminated:
                if time.monotonic() > deadline:
                    raise
                time.sleep(TEARDOWN_POLL_SECONDS)
        state = InstanceState.TERMINATED if mode is TeardownMode.TERMINATE else InstanceState.STOPPED
        self._best_effort(self.db.record_instance, instance)  # known even if found by tag only
        self._best_effort(self.db.set_instance_state, instance, state)
        self._best_effort(self._event, instance.job_id, "teardown:done", instance=instance.id)

    def _salvage(self, job_id: str, instance: Instance) -> None:
        """Before tearing down a reachable instance whose agent died: upload the checkpoints it had not
        (provider.salvage). Best effort: a failure never keeps a machine billing; a resume then starts
        from the newest checkpoint the store has."""
        try:
            saved = self.provider(instance.provider).salvage(instance)
        except Exception as e:  # noqa: BLE001 - unreachable, store refused, ...: the teardown goes on
            self.reporter.warn(f"{job_id}: could not upload the checkpoints left on {instance.id}: {e}")
            return
        for ref in saved:
            self._best_effort(self._event, job_id, "salvaged", instance=instance.id, checkpoint=ref.uri, step=ref.step)
            self._best_effort(self.db.update_job, job_id, last_checkpoint=ref.uri)
            self.reporter.info(f"uploaded {ref.name}, left on {instance.id} by its crashed agent")

    def _teardown_all(self, instances: Iterable[Instance]) -> tuple[list[str], list[str]]:
        """Every instance, each independently: (torn down, still up with the reason)."""
        gone, left = [], []
        for inst in instances:
            try:
                self._teardown_instance(inst)
                gone.append(inst.id)
            except LaunchpadError as e:
                left.append(f"{inst.id}: {e}")
                self._best_effort(self.db.set_instance_state, inst, InstanceState.UNKNOWN)
        return gone, left

    @staticmethod
    def _best_effort(fn: Any, *args: Any, **kwargs: Any) -> None:
        """Logs and state are worth keeping, never worth skipping a teardown for (a full disk, a bad DB)."""
        try:
            fn(*args, **kwargs)
        except (LaunchpadError, OSError) as e:
            log.warning("while tearing down: %s", e)

    # -- down ------------------------------------------------------------------------------------------
    def down(self, job_id: str) -> list[str]:
        """Tear down every instance of a job (known to the state DB or found by tag). Idempotent.
        Raises TeardownIncomplete (after trying all of them) if any instance may still be running."""
        job = self.db.job(job_id)
        try:
            job = self.refresh(job.id)  # a trainer that finished: SUCCEEDED first
        except LaunchpadError as e:
            self.reporter.warn(f"{job.id}: cannot check its trainer first ({e}); tearing down anyway")
        with self.locks.step(job.id):
            self._best_effort(self._event, job.id, "down:requested")
            known = {(i.provider, i.id): i for i in self.db.instances(job.id, live_only=True)}
            for inst in self._tagged_instances():
                if inst.job_id == job.id:  # found by tag now beats what the state DB remembers (a renamed host)
                    known[(inst.provider, inst.id)] = inst
            gone, left = self._teardown_all(known.values())
            if not self.db.job(job.id).state.finished:
                self._transition(job.id, JobState.INTERRUPTED, error="torn down by `launchpad down`", by="down")
        if left:
            raise TeardownIncomplete(_incomplete(left, f"launchpad down {job.id}"), gone=gone, left=left)
        return gone

    def down_all(self) -> list[str]:
        """Every live instance launchpad knows of or can find by tag, on every usable provider."""
        gone, left = [], []
        for job in self.db.jobs():
            if self.db.instances(job.id, live_only=True) or not job.state.finished:
                try:
                    gone += self.down(job.id)
                except TeardownIncomplete as e:
                    gone += e.gone
                    left += e.left
        more_gone, more_left = self._teardown_all(self._tagged_instances())
        gone += more_gone
        left += more_left
        if left:
            raise TeardownIncomplete(_incomplete(left, "launchpad down --all"), gone=gone, left=left)
        return gone

    def _tagged_instances(self) -> Iterator[Instance]:
        for provider in self.providers.values():
            yield from safe_instances(provider)

    # -- logs ------------------------------------------------------------------------------------------
    def logs(self, job_id: str, *, follow: bool = False) -> Iterator[str]:
        job_id = self.db.job(job_id).id
        instance = self._live_instance(job_id)
        if instance is not None:
            yield from self.provider(instance.provider).logs(instance, follow=follow)
            return
        for path in sorted(saved_logs_dir(job_id).glob("*.log")):
            with open(path, encoding="utf-8", errors="replace") as f:
                yield from (line.rstrip("\n") for line in f)

    def _log_tail(self, instance: Instance, n: int = 20) -> list[str]:
        path = saved_logs_dir(instance.job_id) / f"{instance.id}.log"
        self._save_logs(instance)
        try:
            return path.read_text(encoding="utf-8", errors="replace").splitlines()[-n:]
        except OSError:
            return []

    def _save_logs(self, instance: Instance) -> None:
        """Keep the trainer log before the instance goes (best effort: a full disk never stops a teardown)."""
        path = saved_logs_dir(instance.job_id) / f"{instance.id}.log"
        try:
            lines = list(self.provider(instance.provider).logs(instance, follow=False))
            if lines:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        except (LaunchpadError, OSError) as e:
            log.warning("could not keep the log of %s: %s", instance.id, e)


def down_all_by_tag(providers: dict[str, Provider]) -> list[str]:
    """`down --all` without the state DB (unreadable, damaged): every instance found by its tag."""
    gone, left = [], []
    for provider in providers.values():
        for inst in safe_instances(provider):
            try:
                provider.teardown(inst, TeardownMode.TERMINATE)
                gone.append(inst.id)
            except NotYetTerminated:
                left.append(f"{inst.id}: accepted, not gone yet")
            except LaunchpadError as e:
                left.append(f"{inst.id}: {e}")
    if left:
        raise TeardownIncomplete(_incomplete(left, "launchpad down --all"), gone=gone, left=left)
    return gone


def safe_instances(provider: Provider) -> list[Instance]:
    try:
        return provider.instances()
    except ProviderError as e:
        log.warning("%s: cannot list its instances: %s", provider.name, e)
        return []


def saved_logs_dir(job_id: str) -> Path:
    from .settings import data_dir

    return data_dir() / "logs" / job_id


def _incomplete(left: list[str], again: str) -> str:
    return (f"{len(left)} instance(s) may still be running and billing: " + "; ".join(left)
            + f". Fix the cause and run `{again}` again")
