"""The provider contract (launchpad.testing.ProviderConformance) against `ssh` and two real sshd hosts."""

import pytest

from launchpad.testing import ProviderConformance

pytestmark = pytest.mark.sshd


class TestSSHConformance(ProviderConformance):
    @pytest.fixture
    def provider(self, ssh_provider):
        return ssh_provider
