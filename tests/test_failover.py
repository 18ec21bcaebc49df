"""`up` tries offers in plan order; a capacity or quota error blocks the scope it names and moves on; an
auth error blocks the whole provider. Each attempt is an event. The provider here is a real Provider
subclass (a throwaway plugin) whose provision() reports no capacity where the test says so."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from launchpad.errors import AuthError, NoCapacity, NoFeasibleOffer, QuotaExceeded
from launchpad.lifecycle import Lifecycle, SilentReporter
from launchpad.models import Instance, InstanceState, JobProgress, Offer
from launchpad.provider import Provider
from launchpad.recipe import load_recipe
from launchpad.state import StateDB

REPO = Path(__file__).resolve().parent.parent


class CapacityTestProvider(Provider):
    """Sells three CPU offers; `refuse` maps an offer's zone to the error provision() raises there."""

    name = "captest"

    def __init__(self, config=None, refuse=None):
        super().__init__(config)
        self.refuse = refuse or {}
        self.provisioned: list[Offer] = []

    def check(self):
        return None

    def offers(self):
        return [Offer(provider=self.name, instance_type=f"cpu-{i}", region=r, zone=z, vcpus=8, memory_gb=32,
                      price_per_hour=p) for i, (r, z, p) in enumerate([("eu-1", "eu-1a", 0.10), ("eu-1", "eu-1b", 0.11),
                                                                       ("us-1", "us-1a", 0.20)])]

    def provision(self, offer, spec):
        if offer.zone in self.refuse:
            raise self.refuse[offer.zone]
        self.provisioned.append(offer)
        return Instance(provider=self.name, id=f"i-{offer.zone}", job_id=spec.job_id, state=InstanceState.RUNNING,
                        offer=offer, created_at=time.time())

    def sync(self, instance, bundle):
        pass

    def train(self, instance, bundle):
        raise NotImplementedError

    def progress(self, instance):
        return JobProgress()

    def logs(self, instance, *, follow=False):
        return iter(())

    def checkpoint(self, instance, *, timeout=600):
        return None

    def teardown(self, instance, mode=None):
        pass

    def status(self, instance):
        return InstanceState.RUNNING

    def instances(self):
        return []


def lifecycle(provider):
    return Lifecycle(StateDB.open(), {provider.name: provider}, {}, SilentReporter())


@pytest.fixture
def recipe():
    return load_recipe(REPO / "recipes" / "smoke-lora.yaml")


def provision(lc, recipe):
    job_id = lc.submit(recipe, "", provider="captest")
    return job_id, lc._ensure_instance(lc.db.job(job_id))


def test_a_region_without_capacity_is_skipped_whole(recipe):
    p = CapacityTestProvider(refuse={"eu-1a": NoCapacity("no capacity in eu-1", scope="region")})
    lc = lifecycle(p)
    job_id, inst = provision(lc, recipe)
    assert inst.offer.zone == "us-1a", "eu-1b shares the refused region: not tried"
    kinds = [(e["kind"], e["data"].get("offer")) for e in lc.db.events(job_id) if e["kind"].startswith("provision:")]
    assert [k for k, _ in kinds] == ["provision:attempt", "provision:failed", "provision:attempt", "provision:ok"]
    assert "eu-1a" in kinds[0][1] and "us-1a" in kinds[2][1]


def test_a_zone_error_tries_the_next_zone(recipe):
    p = CapacityTestProvider(refuse={"eu-1a": QuotaExceeded("quota", scope="zone")})
    _, inst = provision(lifecycle(p), recipe)
    assert inst.offer.zone == "eu-1b"


def test_an_auth_error_blocks_the_provider_and_says_why(recipe):
    p = CapacityTestProvider(refuse={"eu-1a": AuthError("credentials rejected")})
    lc = lifecycle(p)
    with pytest.raises(NoFeasibleOffer, match="credentials rejected"):
        provision(lc, recipe)
    assert p.provisioned == []


def test_an_attempt_that_never_reported_back_reuses_its_token(recipe):
    p = CapacityTestProvider()
    lc = lifecycle(p)
    job_id = lc.submit(recipe, "", provider="captest")
    offer = p.offers()[0]
    lc.db.add_event(job_id, "provision:attempt", {"offer": offer.label, "token": "tok-crashed", "price": 0.1})
    seen = []
    original = p.provision
    p.provision = lambda o, spec: (seen.append(spec.token), original(o, spec))[1]
    lc._ensure_instance(lc.db.job(job_id))
    assert seen == ["tok-crashed"], "the same token, so the provider returns the instance it may have made"
