"""The provider contract (launchpad.testing.ProviderConformance) on the Vast.ai double, each rented machine
reached over the loopback sshd."""

from __future__ import annotations

import pytest
from vast_helpers import RELIABLE, offer_on

from launchpad.testing import ProviderConformance

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


class TestVastConformance(ProviderConformance):
    @pytest.fixture
    def provider(self, vast):
        return vast

    @pytest.fixture
    def offer(self, provider):
        return offer_on(provider, RELIABLE)
