"""The ARM double (tests/providers/azure/arm_double.py) per test, the client's credential from a real
azure-identity path (DefaultAzureCredential -> managed identity -> an IMDS token endpoint on loopback, via
AZURE_POD_IDENTITY_AUTHORITY_HOST), Azurite for az:// checkpoints, and one loopback sshd that plays every VM.

The double hands out TEST-NET public addresses. They are never contacted: the test session refuses
non-loopback sockets, and the ssh config written here maps every host name to the sshd (``Host *`` with
``HostName 127.0.0.1`` and ``Port``). The sshd's sessions get Azurite's connection string (OpenSSH
``SetEnv``), standing in for the storage access a real VM would have, so the agent's uploads land in Azurite.
"""

from __future__ import annotations

import os

import pytest
import yaml
from arm_double import ArmDouble, ImdsIdentity
from azure_helpers import azure_settings

from launchpad.testing_ssh import LoopbackSshd


@pytest.fixture(scope="session")
def azurite(tmp_path_factory):
    from launchpad.testing_stores import ServerMissing, start_azurite

    try:
        server = start_azurite(tmp_path_factory.mktemp("azurite"))
    except ServerMissing as e:
        if os.environ.get("CI") == "true":
            pytest.fail(str(e))
        pytest.skip(str(e))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def vm_sshd(tmp_path_factory, azurite):
    from launchpad.testing_ssh import SSHD

    if not os.path.exists(SSHD):
        pytest.skip("needs OpenSSH's sshd: apt-get install -y openssh-server")
    env = {"HF_HUB_OFFLINE": "1", **azurite.env}
    server = LoopbackSshd(tmp_path_factory.mktemp("azure-sshd"), name="azure", env=env).start()
    yield server
    server.stop()


@pytest.fixture
def arm(monkeypatch):
    """A fresh ARM double, and this process's DefaultAzureCredential answered by its IMDS token endpoint."""
    with ArmDouble() as double, ImdsIdentity(double.admin_token) as imds:
        monkeypatch.setenv("AZURE_POD_IDENTITY_AUTHORITY_HOST", imds.url)
        for k in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_SUBSCRIPTION_ID",
                  "AZURE_FEDERATED_TOKEN_FILE", "IDENTITY_ENDPOINT", "MSI_ENDPOINT"):
            monkeypatch.delenv(k, raising=False)
        double.imds = imds  # type: ignore[attr-defined]
        yield double


@pytest.fixture
def azure_config(tmp_path, vm_sshd, launchpad_home, arm, azurite, monkeypatch):
    """The azure provider's settings, also written to the test home's config.yaml."""
    for k, v in azurite.env.items():
        monkeypatch.setenv(k, v)  # this client reads checkpoints from Azurite too
    cfg = azure_settings(tmp_path, vm_sshd, arm.url)
    (launchpad_home / "config.yaml").write_text(yaml.safe_dump({"providers": {"azure": cfg}}))
    return cfg


@pytest.fixture
def azure(azure_config):
    from launchpad_azure import AzureProvider

    provider = AzureProvider(azure_config)
    yield provider
    provider.close()
