"""The provider contract (launchpad.testing.ProviderConformance) on the Lambda API double, each instance
reached over the loopback sshd."""

from __future__ import annotations

import pytest
from lambda_helpers import cheap_offer

from launchpad.testing import ProviderConformance

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


class TestLambdaConformance(ProviderConformance):
    @pytest.fixture
    def provider(self, lambda_provider):
        return lambda_provider

    @pytest.fixture
    def offer(self, provider):
        return cheap_offer(provider)
