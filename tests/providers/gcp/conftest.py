"""A GCE double (the real google-cloud-compute client talks to it over loopback), gcp-storage-emulator for
the checkpoints, and one loopback sshd that plays every VM.

The double hands out real-looking external addresses. They are never contacted: the test session refuses
non-loopback sockets, and the ssh config written here maps every host name to the sshd. The sshd's
sessions get the emulator's address and the double's metadata server (OpenSSH ``SetEnv``), standing in for
the VM's service account, so the agent's GCS uploads land in the emulator.
"""

from __future__ import annotations

import os

import pytest
import yaml
from gce_double import GCEDouble
from gcp_helpers import PROJECT, ZONES, gcp_settings, service_account_key

from launchpad.testing_ssh import LoopbackSshd
from launchpad.testing_stores import ServerMissing, start_gcs_emulator


@pytest.fixture(scope="session")
def gce(tmp_path_factory):
    double = GCEDouble(PROJECT, ZONES).start()
    key_file = tmp_path_factory.mktemp("gcp-adc") / "service-account.json"
    double.public_keys.append(service_account_key(key_file, f"{double.url}/token"))
    double.key_file = key_file  # type: ignore[attr-defined]
    yield double
    double.stop()


@pytest.fixture(scope="session")
def gcs(tmp_path_factory):
    try:
        server = start_gcs_emulator(tmp_path_factory.mktemp("gcs"), project=PROJECT)
    except ServerMissing as e:
        pytest.fail(str(e))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def vm_sshd(tmp_path_factory, gce, gcs):
    from launchpad.testing_ssh import SSHD

    if not os.path.exists(SSHD):
        pytest.skip("needs OpenSSH's sshd: apt-get install -y openssh-server")
    env = {**gcs.env, "GCE_METADATA_HOST": gce.url.removeprefix("http://"), "HF_HUB_OFFLINE": "1"}
    server = LoopbackSshd(tmp_path_factory.mktemp("gce-sshd"), name="gce", env=env).start()
    gce.host_key = server.host_key_line()
    yield server
    server.stop()


@pytest.fixture
def gcp_env(gce, gcs, monkeypatch):
    """A fresh double and ADC pointed at the test's service-account key."""
    gce.reset()
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(gce.key_file))
    for k, v in gcs.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("CLOUDSDK_CONFIG", raising=False)
    return gce


@pytest.fixture
def gcp_config(tmp_path, vm_sshd, launchpad_home, gcp_env):
    """The gcp provider's settings, also written to the test home's config.yaml."""
    cfg = gcp_settings(tmp_path, vm_sshd, gcp_env.url)
    (launchpad_home / "config.yaml").write_text(yaml.safe_dump({"providers": {"gcp": cfg}}))
    return cfg


@pytest.fixture
def gcp(gcp_config):
    from launchpad_gcp import GCPProvider

    provider = GCPProvider(gcp_config)
    yield provider
    provider.close()
