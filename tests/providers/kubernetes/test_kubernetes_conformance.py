"""The provider contract (launchpad.testing.ProviderConformance) on the Kubernetes API double: each
instance a Job whose pod is a local process, reached through the exec websocket."""

from __future__ import annotations

import pytest

from launchpad.testing import ProviderConformance


class TestKubernetesConformance(ProviderConformance):
    @pytest.fixture
    def provider(self, k8s):
        return k8s

    @pytest.fixture
    def offer(self, provider):
        return next(o for o in provider.offers() if o.gpu == "A100" and o.gpu_count == 1)
