"""`launchpad status`'s cost so far: instance time at the price the offer was bought at (the spot price for
a spot offer), no compute after a stop, and the block volumes' part (launchpad.planner.disk.disk_usd_so_far)."""

from __future__ import annotations

import io
import time

import pytest

from launchpad.jobspec import JobSpec
from launchpad.models import Instance, InstanceState, Offer
from launchpad.planner.disk import disk_usd_so_far
from launchpad.state import JobOptions

HOUR = 3600.0


@pytest.fixture
def db(state_db):  # on SQLite and on PostgreSQL (tests/conftest.py)
    db = state_db
    db.create_job("j", None, JobSpec(job_id="j-1", recipe={"name": "j"}), "name: j\n", JobOptions())
    return db


def instance(offer: Offer, hours_ago: float, data: dict | None = None, iid: str = "i-1") -> Instance:
    return Instance(provider=offer.provider, id=iid, job_id="j-1", state=InstanceState.RUNNING, offer=offer,
                    created_at=time.time() - hours_ago * HOUR, data=data or {})


def test_spot_instances_cost_the_spot_price(db) -> None:
    spot = Offer(provider="aws", instance_type="p5.4xlarge", region="us-east-1", price_per_hour=6.88,
                 spot_price_per_hour=2.0, spot=True)
    db.record_instance(instance(spot, 1.0))
    assert db.cost_so_far("j-1") == pytest.approx(2.0, rel=1e-3)


def test_a_stopped_instance_bills_no_compute_after_the_stop(db) -> None:
    offer = Offer(provider="aws", instance_type="p5.4xlarge", region="us-east-1", price_per_hour=6.88)
    inst = instance(offer, 2.0)
    db.record_instance(inst)
    db.set_instance_state(inst, InstanceState.STOPPED)
    later = time.time() + 10 * HOUR
    assert db.cost_so_far("j-1", now=later) == pytest.approx(2 * 6.88, rel=1e-3)
    db.set_instance_state(inst, InstanceState.TERMINATED)  # the first end time stays
    assert db.cost_so_far("j-1", now=later) == pytest.approx(2 * 6.88, rel=1e-3)


def test_disk_bills_while_running_and_stopped_until_terminated(db) -> None:
    offer = Offer(provider="aws", instance_type="p5.4xlarge", region="us-east-1", price_per_hour=6.88)
    inst = instance(offer, 720.0, {"disk_gb": 50})  # one 30-day month of a 50 GB gp3 volume: 50 x $0.08
    db.record_instance(inst)
    now = time.time()
    assert disk_usd_so_far(db.instance_spans("j-1"), now=now) == pytest.approx(4.0, rel=1e-3)
    db.set_instance_state(inst, InstanceState.STOPPED)
    stopped = db.instance_spans("j-1")
    assert stopped[0][0].state is InstanceState.STOPPED and stopped[0][2] is not None
    assert disk_usd_so_far(stopped, now=now + 720 * HOUR) == pytest.approx(8.0, rel=1e-3)  # still billing
    gone = instance(offer, 720.0, {"disk_gb": 50}, iid="i-2")
    db.record_instance(gone)
    db.set_instance_state(gone, InstanceState.TERMINATED)
    spans = [s for s in db.instance_spans("j-1") if s[0].id == "i-2"]
    assert disk_usd_so_far(spans, now=now + 720 * HOUR) == pytest.approx(4.0, rel=1e-3)  # deleted with it


def test_no_disk_part_without_a_recorded_volume_or_price(db) -> None:
    local = Offer(provider="local", instance_type="cpu", region="local")
    db.record_instance(instance(local, 5.0, {"disk_gb": 50}))  # local: its disk is already paid for
    ssh = Offer(provider="aws", instance_type="p5.4xlarge", region="us-east-1", price_per_hour=6.88)
    db.record_instance(instance(ssh, 5.0, iid="i-2"))  # no disk_gb recorded by the provider
    assert disk_usd_so_far(db.instance_spans("j-1")) == 0.0


def test_status_views_show_the_disk_part(monkeypatch) -> None:
    from rich.console import Console

    from launchpad.cli import _views

    row = {"id": "j-1", "name": "j", "state": "TRAINING", "provider": "aws", "step": 5, "total_steps": 10,
           "loss": None, "last_checkpoint": None, "cost_usd": 1.5, "disk_usd": 0.25, "created_at": None}
    out = io.StringIO()
    con = Console(file=out, width=120, color_system=None)
    _views.render_jobs([row], con)
    assert "$1.75" in out.getvalue()  # instance time + disk
    out = io.StringIO()
    monkeypatch.setattr(_views, "console", lambda: Console(file=out, width=120, color_system=None))
    _views.render_job(row, [])
    _views.render_job({**row, "disk_usd": 0.0}, [])
    text = out.getvalue()
    assert "$1.75 so far (instance $1.50, disk $0.25)" in text and "$1.50 so far" in text  # no disk part: none billed
    assert text.count("disk $") == 1


def test_a_multi_node_instance_bills_every_node(db):
    offer = Offer("aws", "p4d.24xlarge", "us-east-1", price_per_hour=30.0)
    inst = Instance("aws", "i-1", "job", InstanceState.RUNNING, offer=offer, created_at=1000.0,
                    data={"nodes": [{"rank": 0, "id": "i-1"}, {"rank": 1, "id": "i-2"}]})
    db.record_instance(inst)
    assert db.cost_so_far("job", now=1000.0 + 3600) == 60.0
