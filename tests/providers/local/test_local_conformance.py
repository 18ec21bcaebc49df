import pytest

from launchpad.testing import ProviderConformance
from launchpad_local import LocalProvider


class TestLocalConformance(ProviderConformance):
    @pytest.fixture
    def provider(self):
        return LocalProvider()
