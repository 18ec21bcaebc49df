import pytest
from launchpad_local import LocalProvider

from launchpad.testing import ProviderConformance


class TestLocalConformance(ProviderConformance):
    @pytest.fixture
    def provider(self):
        return LocalProvider()
