"""A loopback Kubernetes API double (kube_double.py) playing a GPU cluster whose pods run as local
processes, a kubeconfig naming it, and the provider pointed at it. Checkpoints go to a file:// store:
the "pod" is a process on this machine."""

from __future__ import annotations

import pytest
import yaml
from kube_double import KubeDouble
from kube_helpers import GFD_NODES, settings, write_kubeconfig


@pytest.fixture
def kube(tmp_path):
    double = KubeDouble(tmp_path / "double", nodes=GFD_NODES, image_env={"HF_HUB_OFFLINE": "1"}).start()
    yield double
    double.stop()


@pytest.fixture
def kubeconfig(tmp_path, kube):
    return write_kubeconfig(tmp_path / "kubeconfig", [kube.kubeconfig_entry("gpu-cluster", "ml")], "gpu-cluster")


@pytest.fixture
def kube_config(tmp_path, kubeconfig, launchpad_home):
    """The provider's settings, also written to the test home's config.yaml."""
    cfg = settings(tmp_path, kubeconfig)
    (launchpad_home / "config.yaml").write_text(yaml.safe_dump({"providers": {"kubernetes": cfg}}))
    return cfg


@pytest.fixture
def k8s(kube_config):
    from launchpad_kubernetes import KubernetesProvider

    provider = KubernetesProvider(kube_config)
    yield provider
    provider.close()
