"""What moving the final checkpoint costs, by where its store is (the recipe's `checkpoint.uri`).

The estimate charges the final checkpoint once for leaving the cloud (the user downloads it): at the
store's cloud's internet egress rate. Before that it travels from the instance to the store:

    same cloud, same region             free
    same cloud, another region          the cloud's inter-region rate (`interregion_per_gb`)
    same cloud, region not known        the inter-region rate (a bucket named by the user: unknown offline)
    another cloud                       the instance cloud's internet egress (`egress_per_gb`)

With no `checkpoint.uri`, the store is the provider's default one, made in the instance's own region
(aws, gcp), so only the download is charged, at the instance cloud's rate. A `file://` store is a path on
the instance (or on this machine for `local`): only the download, at the instance cloud's rate.

The bucket's region is read from launchpad's own bucket names (``launchpad-<account>-<region>``,
``launchpad-<project>-<region>``) without any API call, so `plan` stays offline.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..models import Offer
from .catalog import facts_for

SCHEME_CLOUD = {"s3": "aws", "gs": "gcp", "az": "azure"}
DEFAULT_INTERREGION_PER_GB = 0.02
# launchpad's own buckets end with their region: AWS us-east-1 / eu-central-2, GCP us-central1 / europe-west4
_REGION_SUFFIX = {
    "aws": re.compile(r"^launchpad-\d{12}-([a-z]{2}(?:-gov)?-[a-z]+-\d)$"),
    "gcp": re.compile(r"^launchpad-.+-([a-z]+-[a-z]+\d+)$"),
}


@lru_cache(maxsize=256)
def store_location(uri: str | None) -> tuple[str | None, str | None]:
    """(cloud, region) of a checkpoint store URI: cloud None for file:// or no URI (the default store)."""
    if not uri or "://" not in uri:
        return None, None
    scheme, rest = uri.split("://", 1)
    cloud = SCHEME_CLOUD.get(scheme)
    if cloud is None:
        return None, None
    bucket = rest.split("/", 1)[0].split("@", 1)[0]
    pattern = _REGION_SUFFIX.get(cloud)
    m = pattern.match(bucket) if pattern else None
    return cloud, (m.group(1) if m else None)


def _rate(provider: str, instance_type: str, key: str, default: float) -> float:
    facts = facts_for(provider, instance_type)
    if not facts.known:
        return default
    return float(getattr(facts, key))


def egress_per_gb(offer: Offer, checkpoint_uri: str | None, default_internet: float) -> float:
    """USD per GB of the final checkpoint for a job on `offer` whose store is `checkpoint_uri`."""
    internet = _rate(offer.provider, offer.instance_type, "egress_per_gb", default_internet)
    cloud, region = store_location(checkpoint_uri)
    if cloud is None:  # the default store (in the instance's region) or file://: only the download
        return internet
    download = _rate(cloud, "", "egress_per_gb", default_internet)
    if cloud != offer.provider:
        return internet + download
    if region is not None and region == offer.region:
        return download
    return _rate(cloud, offer.instance_type, "interregion_per_gb", DEFAULT_INTERREGION_PER_GB) + download
