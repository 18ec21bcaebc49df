"""The provider contract (launchpad.testing.ProviderConformance) on moto's EC2, each instance reached over
the loopback sshd."""

from __future__ import annotations

import pytest
from aws_helpers import cheap_offer

from launchpad.testing import ProviderConformance

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


class TestAWSConformance(ProviderConformance):
    @pytest.fixture
    def provider(self, aws):
        return aws

    @pytest.fixture
    def offer(self, provider):
        return cheap_offer(provider)
