"""pytest plugin (entry point `pytest11: launchpad`): fixtures and the provider conformance suite.

A provider plugin proves it honours the `Provider` contract by subclassing `ProviderConformance` in
its tests and supplying two fixtures::

    from launchpad.testing import ProviderConformance

    class TestMyProvider(ProviderConformance):
        @pytest.fixture
        def provider(self):
            return MyProvider({...})          # pointed at a real (loopback) endpoint

        @pytest.fixture
        def offer(self, provider):
            return provider.offers()[0]

Kept free of heavy imports: pytest loads this module in every run.
"""

from __future__ import annotations

import os
import resource
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest


@dataclass
class Timing:
    """What `timed` measured, in seconds; filled in when its block ends."""

    wall: float = 0.0
    cpu: float = 0.0


def _cpu_seconds(children: bool) -> float:
    if not children:
        return time.process_time()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def timed(*, children: bool = False) -> Iterator[Timing]:
    """Time a block for a "this is fast" check: its CPU seconds (this process's, or with `children=True`
    those of the child processes it waited for, e.g. a CLI run through subprocess) and its wall seconds.
    Compare the CPU time with the target: other processes' load (CI, pytest-xdist's other workers) does not
    count in it, and a blow-up still does. Bound the wall time only loosely, to catch a hang."""
    result = Timing()
    wall, cpu = time.perf_counter(), _cpu_seconds(children)
    try:
        yield result
    finally:
        result.wall, result.cpu = time.perf_counter() - wall, _cpu_seconds(children) - cpu


@pytest.fixture
def launchpad_home(tmp_path, monkeypatch):
    """An isolated LAUNCHPAD_HOME (state, config, caches) for one test."""
    home = tmp_path / "lp-home"
    home.mkdir()
    monkeypatch.setenv("LAUNCHPAD_HOME", str(home))
    monkeypatch.delenv("LAUNCHPAD_STATE_URL", raising=False)  # never a developer's (team's) real state
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from launchpad import plugins

    plugins.reset()
    yield home
    plugins.reset()


@pytest.fixture(scope="session")
def launchpad_sshd(tmp_path_factory):
    """A real sshd on 127.0.0.1 (key auth, pinned host key) for `VMProvider` subclasses: `.config()` has
    address, port, user, key, host_key, python and root. Skips when OpenSSH's sshd is not installed."""
    from .testing_ssh import SSHD, LoopbackSshd

    if not os.path.exists(SSHD):
        pytest.skip("needs OpenSSH's sshd: apt-get install -y openssh-server")
    server = LoopbackSshd(tmp_path_factory.mktemp("launchpad-sshd")).start()
    yield server
    server.stop()


class ProviderConformance:
    """The contract tests every provider must pass (see launchpad/provider.py)."""

    @pytest.fixture
    def provider(self):  # pragma: no cover - supplied by the subclass
        raise NotImplementedError("define a `provider` fixture")

    @pytest.fixture
    def offer(self, provider):
        return provider.offers()[0]

    @pytest.fixture
    def spec(self):
        from launchpad.models import JOB_TAG, InstanceSpec

        job_id = f"conformance-{uuid.uuid4().hex[:6]}"
        return InstanceSpec(job_id=job_id, token=f"{job_id}-0", tags={JOB_TAG: job_id})

    @pytest.fixture
    def instance(self, provider, offer, spec):
        from launchpad.models import TeardownMode

        inst = provider.provision(offer, spec)
        yield inst
        provider.teardown(inst, TeardownMode.TERMINATE)

    def test_name_and_check(self, provider):
        assert isinstance(provider.name, str) and provider.name
        reason = provider.check()
        assert reason is None or (isinstance(reason, str) and "\n" not in reason)

    def test_offers_are_offers(self, provider):
        from launchpad.models import Offer

        offers = provider.offers()
        assert offers, "a usable provider offers something"
        for o in offers:
            assert isinstance(o, Offer) and o.provider == provider.name
            assert o.price_per_hour >= 0 and o.gpu_count >= 0

    def test_capabilities_have_reasons(self, provider):
        for cap, reason in provider.unsupported.items():
            assert isinstance(reason, str) and reason, f"{cap} needs a user-facing reason"

    def test_provision_is_idempotent_on_token(self, provider, offer, spec, instance):
        again = provider.provision(offer, spec)
        assert again.id == instance.id
        assert sum(1 for i in provider.instances() if i.job_id == spec.job_id) == 1

    def test_instance_is_tagged_and_found(self, provider, spec, instance):
        from launchpad.models import InstanceState

        assert instance.job_id == spec.job_id
        assert provider.status(instance) in (InstanceState.PENDING, InstanceState.RUNNING)
        assert instance.id in {i.id for i in provider.instances() if i.job_id == spec.job_id}

    def test_teardown_is_idempotent(self, provider, offer, spec):
        from launchpad.models import InstanceState, TeardownMode

        inst = provider.provision(offer, spec)
        provider.teardown(inst, TeardownMode.TERMINATE)
        provider.teardown(inst, TeardownMode.TERMINATE)  # already gone: silent
        assert provider.status(inst) is InstanceState.TERMINATED
        assert inst.id not in {i.id for i in provider.instances()}

    def test_progress_before_training(self, provider, instance):
        from launchpad.models import JobProgress

        p = provider.progress(instance)
        assert isinstance(p, JobProgress) and not p.running and p.step == 0

    def test_logs_before_training_are_empty(self, provider, instance):
        assert list(provider.logs(instance, follow=False)) == []

    def test_checkpoint_is_implemented(self, provider):
        from launchpad.provider import Provider

        cls = type(provider)
        hooks = cls.request_save is not Provider.request_save and cls.latest_checkpoint is not Provider.latest_checkpoint
        assert cls.checkpoint is not Provider.checkpoint or hooks, \
            "implement request_save() and latest_checkpoint(), or override checkpoint()"
        assert provider.transfer_progress is None or callable(provider.transfer_progress)

    def test_checkpoint_before_training_is_none(self, provider, instance):
        assert provider.checkpoint(instance, timeout=30) is None

    def test_salvage_before_training_uploads_nothing(self, provider, instance):
        assert provider.salvage(instance) == [] and provider.salvage(instance) == []  # idempotent, never raises

    def test_default_checkpoint_uri_is_a_uri_or_none(self, provider):
        uri = provider.default_checkpoint_uri()
        assert uri is None or "://" in uri


def pytest_configure(config):
    # Keep transformers and the hub offline in every test run of a launchpad plugin.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
