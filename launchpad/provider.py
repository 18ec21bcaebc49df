"""The provider contract. A provider is one account/cluster of one kind of compute.

To add a provider: subclass `Provider`, set `name`, implement the abstract methods, and register the
class from a plugin module published under the entry-point group ``launchpad``::

    from launchpad.plugins import hookimpl

    @hookimpl
    def launchpad_register_providers(register):
        register(MyProvider)

`providers/local/launchpad_local/` is the complete worked example; run the conformance suite in
`launchpad.testing` against yours.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

from .errors import ConfigError, ProviderError
from .models import (
    Bundle,
    Capability,
    CheckpointRef,
    Instance,
    InstanceSpec,
    InstanceState,
    JobProgress,
    Offer,
    TeardownMode,
    TrainHandle,
)


class Provider(ABC):
    """One configured account/cluster. Constructed cheaply (no I/O) from its config section."""

    #: unique short name: the entry-point name, the `resources.providers` value, the `--provider` value
    name: ClassVar[str]
    #: capabilities this provider LACKS, each with the reason the user is shown, e.g.
    #: ``{Capability.STOP: "Lambda cannot stop VMs, only terminate them"}``. The planner filters on it.
    unsupported: ClassVar[Mapping[Capability, str]] = {}
    #: set by the caller before `sync` to watch uploads: called as ``(what, bytes done, bytes total)``
    #: while a file (the wheel, a dataset) goes to the instance. None = nobody watches. Providers that
    #: upload nothing never call it.
    transfer_progress: Callable[[str, int, int], None] | None = None
    #: None when the provider makes a store of its own (a default bucket); else why it has none ("Lambda Cloud
    #: has no object store of its own"): a job then needs the recipe's `checkpoint.uri` or the provider's
    #: `checkpoint_uri` setting, and the lifecycle refuses the offer before anything is rented (`store_problem`)
    no_store_reason: ClassVar[str | None] = None

    def __init__(self, config: Mapping[str, Any] | None = None):
        self.config = dict(config or {})

    def supports(self, capability: Capability) -> bool:
        return capability not in self.unsupported

    def render(self, offer: Offer, spec: InstanceSpec) -> str | None:
        """What `provision(offer, spec)` would create, as text an administrator can read before anything
        runs (Kubernetes: the manifests as YAML), creating nothing (``launchpad up --dry-run``). Default:
        None, this provider has nothing to show."""
        return None

    def default_checkpoint_uri(self) -> str | None:
        """Where checkpoints go when the recipe names no `checkpoint.uri`; None = the recipe must name one."""
        return None

    def checkpoint_uri_for(self, instance: Instance) -> str | None:
        """The store for a job on `instance` whose recipe names none (asked once, before the first sync;
        the answer is kept in the job spec). Default: `default_checkpoint_uri()`; raises ConfigError with
        `store_problem()` when there is none."""
        problem = self.store_problem()
        if problem:
            raise ConfigError(problem)
        return self.default_checkpoint_uri()

    def store_problem(self) -> str | None:
        """Why a job whose recipe names no `checkpoint.uri` cannot run here, as one line with the fix; None
        if it can. No I/O: the lifecycle asks it before renting anything."""
        if self.no_store_reason is None or self.default_checkpoint_uri():
            return None
        return (f"checkpoint.uri: the recipe names none and {self.no_store_reason} (name one in the recipe: "
                f"s3://BUCKET/PREFIX, gs://... or az://..., with the store's credentials in the recipe's env; "
                f"or set providers.{self.name}.checkpoint_uri in config.yaml)")

    # -- discovery ---------------------------------------------------------------------------------
    @abstractmethod
    def check(self) -> str | None:
        """Is this provider usable here? Return None if so, else a one-line reason with the fix
        ("no AWS credentials: run `aws configure`"). Never raises."""

    def describe(self) -> str | None:
        """One line on what is usable, shown by `launchpad check` after a successful `check()` (e.g. the
        regions enabled, the hosts listed). May do I/O; may raise `LaunchpadError`. Default: None."""
        return None

    @abstractmethod
    def offers(self) -> list[Offer]:
        """Every `Offer` this provider can sell (catalog and/or live API). No filtering: the planner
        filters and keeps the reasons. May raise `ProviderError`."""

    # -- lifecycle ---------------------------------------------------------------------------------
    @abstractmethod
    def provision(self, offer: Offer, spec: InstanceSpec) -> Instance:
        """Start an instance for `offer`. Idempotent on ``spec.token``: a second call with the same
        token returns the same instance (reconcile by tag, never trust the API alone). Tags every
        resource ``launchpad-job=<spec.job_id>`` plus ``spec.tags``. Returns quickly, possibly while
        the instance is still PENDING. Raises `NoCapacity` (with a `scope`) to move to the next offer,
        `AuthError` when credentials are rejected."""

    @abstractmethod
    def sync(self, instance: Instance, bundle: Bundle) -> None:
        """Push the launchpad code, the job spec and the recipe; prepare the environment. Waits for
        the instance to be reachable. Resumable: calling it again finishes or repeats cheaply."""

    @abstractmethod
    def train(self, instance: Instance, bundle: Bundle) -> TrainHandle:
        """Start the trainer for the synced job and return immediately. If a trainer for this job
        is already running on the instance, return its handle instead of starting a second one.
        The trainer resumes by itself from the newest complete checkpoint in the store."""

    @abstractmethod
    def progress(self, instance: Instance) -> JobProgress:
        """What the trainer/agent reports (status.json) and whether the trainer process is alive.
        Must not parse logs. Returns `JobProgress()` if nothing was reported yet."""

    @abstractmethod
    def logs(self, instance: Instance, *, follow: bool = False) -> Iterator[str]:
        """Yield the trainer log's lines; with `follow`, keep yielding until the trainer exits."""

    def checkpoint(self, instance: Instance, *, timeout: float = 600) -> CheckpointRef | None:
        """Ask the trainer to save now and wait until that checkpoint's MANIFEST.json is in the
        object store; return it. If no trainer runs, return the newest complete checkpoint (or None).
        Raises `ProviderError` when no checkpoint arrives within `timeout` s.

        The default does it with the three parts below: `request_save`, then `progress` until
        ``last_checkpoint_step`` (set once a checkpoint's manifest is uploaded) reaches the step at
        which it asked, or the trainer ended; then `latest_checkpoint`. A provider implements those
        two hooks, or overrides this method when its trainer cannot be asked that way."""
        p = self.progress(instance)
        if p.running:
            before = p.step
            self.request_save(instance)
            deadline = time.monotonic() + timeout
            while (p.last_checkpoint_step if p.last_checkpoint_step is not None else -1) < before and p.running:
                if time.monotonic() > deadline:
                    raise ProviderError(f"{instance.id}: no checkpoint within {timeout:.0f} s", provider=self.name)
                time.sleep(0.5)
                p = self.progress(instance)
        return self.latest_checkpoint(instance)

    def request_save(self, instance: Instance) -> None:
        """Ask the instance's running trainer to save a checkpoint at the end of its current step, and
        return at once (the save and its upload happen in the background; `checkpoint` waits for them).
        Does nothing if the job was never synced there. Trainers run by launchpad's agent are asked by
        creating the ``SAVE_NOW`` file in the job's work directory (launchpad.agent FILES["save_now"]).
        Default: raises NotImplementedError (then the provider overrides `checkpoint`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot ask a trainer to save")

    def latest_checkpoint(self, instance: Instance) -> CheckpointRef | None:
        """The newest complete checkpoint (one with a valid MANIFEST.json) of the instance's job in the
        store its trainer writes to, or None when there is none or the job was never synced there.
        Default: raises NotImplementedError (then the provider overrides `checkpoint`)."""
        raise NotImplementedError(f"{type(self).__name__} cannot look up checkpoints")

    def salvage(self, instance: Instance) -> list[CheckpointRef]:
        """Before a reachable instance whose agent died (a crash, `kill -9`) is torn down: upload the
        complete checkpoints that agent had been handed and not yet uploaded (the only copy is on the
        instance's disk), so a resume continues from them rather than from the one before. Returns what
        was uploaded. Idempotent; does nothing while an agent runs there (it uploads them itself).
        Default: nothing is kept on instances, so nothing to salvage."""
        return []

    @abstractmethod
    def teardown(self, instance: Instance, mode: TeardownMode = TeardownMode.TERMINATE) -> None:
        """Stop or terminate. Idempotent and silent if the instance is already gone. Raises
        `NotYetTerminated` if the provider accepted the request but the instance is not gone yet:
        the caller polls by calling again."""

    @abstractmethod
    def status(self, instance: Instance) -> InstanceState:
        """The instance's state as the provider sees it now, TERMINATED if it no longer exists,
        PREEMPTED if it was reclaimed. Never raises for a missing instance."""

    @abstractmethod
    def instances(self) -> list[Instance]:
        """Every live launchpad-tagged instance of this provider, found by tag (not from local
        state, which may be gone): the reaper and `down --all` rely on it."""
