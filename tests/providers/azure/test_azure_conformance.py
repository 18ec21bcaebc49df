"""The provider contract (launchpad.testing.ProviderConformance) on the ARM double, each VM reached over the
loopback sshd."""

from __future__ import annotations

import pytest
from azure_helpers import cheap_offer

from launchpad.testing import ProviderConformance

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


class TestAzureConformance(ProviderConformance):
    @pytest.fixture
    def provider(self, azure):
        return azure

    @pytest.fixture
    def offer(self, provider):
        return cheap_offer(provider)
