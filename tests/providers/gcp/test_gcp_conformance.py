"""The provider contract (launchpad.testing.ProviderConformance) on the GCE double, each VM reached over the
loopback sshd."""

from __future__ import annotations

import pytest
from gcp_helpers import cheap_offer

from launchpad.testing import ProviderConformance

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


class TestGCPConformance(ProviderConformance):
    @pytest.fixture
    def provider(self, gcp):
        return gcp

    @pytest.fixture
    def offer(self, provider):
        return cheap_offer(provider)
