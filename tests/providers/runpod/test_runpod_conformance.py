"""The provider contract (launchpad.testing.ProviderConformance) on the RunPod GraphQL double, each pod reached
over the loopback sshd."""

from __future__ import annotations

import pytest
from runpod_helpers import cheap_offer

from launchpad.testing import ProviderConformance

pytestmark = [pytest.mark.sshd]


class TestRunPodConformance(ProviderConformance):
    @pytest.fixture
    def provider(self, runpod):
        return runpod

    @pytest.fixture
    def offer(self, provider):
        return cheap_offer(provider)
