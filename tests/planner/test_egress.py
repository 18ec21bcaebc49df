"""The final checkpoint's egress by where its store is (launchpad.planner.egress): free within the region,
the inter-region rate within a cloud, internet egress to another cloud, plus the download from the store's
cloud. Rates are configs/providers.yaml's aws/gcp figures."""

from __future__ import annotations

import pytest
from planner_helpers import gpu_offer, static_provider

from launchpad.planner import plan
from launchpad.planner.egress import egress_per_gb, store_location

AWS, GCP = 0.09, 0.12  # internet egress per GB
INTER = 0.02  # between two regions of one cloud


@pytest.mark.parametrize("uri, where", [
    (None, (None, None)),
    ("file:///data/ckpt", (None, None)),
    ("s3://launchpad-123456789012-eu-central-1/checkpoints", ("aws", "eu-central-1")),
    ("s3://my-team-models/run1", ("aws", None)),
    ("gs://launchpad-my-proj-42-us-central1/checkpoints", ("gcp", "us-central1")),
    ("gs://models/x", ("gcp", None)),
    ("az://ckpt@myaccount/x", ("azure", None)),
])
def test_where_a_store_is(uri, where):
    assert store_location(uri) == where


def test_rates_by_where_the_store_is():
    a2 = gpu_offer("gcp", "a2-highgpu-1g", region="us-central1")
    assert egress_per_gb(a2, None, 0.09) == pytest.approx(GCP)  # default store, same region: the download only
    assert egress_per_gb(a2, "gs://launchpad-p-us-central1/c", 0.09) == pytest.approx(GCP)
    assert egress_per_gb(a2, "gs://launchpad-p-europe-west4/c", 0.09) == pytest.approx(INTER + GCP)
    assert egress_per_gb(a2, "gs://team-bucket/c", 0.09) == pytest.approx(INTER + GCP)  # region unknown offline
    assert egress_per_gb(a2, "s3://team-bucket/c", 0.09) == pytest.approx(GCP + AWS)  # out of GCP, then out of AWS


def test_the_plan_charges_a_store_in_another_cloud(write_recipe):
    same = write_recipe(checkpoint={"uri": "gs://launchpad-p-us-central1/ckpt"})
    other = write_recipe(checkpoint={"uri": "s3://launchpad-123456789012-us-east-1/ckpt"})
    offer = gpu_offer("gcp", "a2-highgpu-1g", gpu="A100", mem=40, price=3.0, region="us-central1")
    costs = {}
    for name, recipe in (("same", same), ("other", other)):
        p = plan(recipe, {"gcp": static_provider("gcp", [offer])}, {}, include_catalog=False)
        [ranked] = p.ranked
        costs[name] = ranked.breakdown["egress_usd"]
        gb = p.need.checkpoint_bytes / 1e9
    assert costs["same"] == pytest.approx(gb * GCP)
    assert costs["other"] == pytest.approx(gb * (GCP + AWS))
