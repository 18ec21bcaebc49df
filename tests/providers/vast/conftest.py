"""The Vast.ai double (the provider's own HTTP client talks to it over loopback), moto's S3 for the checkpoints
(Vast has no object store), and one loopback sshd that plays every rented machine.

The double hands out Vast-like SSH proxy names and TEST-NET addresses. They are never contacted: the test
session refuses non-loopback sockets, and the ssh config written here maps every host name to 127.0.0.1 (the
port is the sshd's, as the double reports it). The sshd's sessions get moto's endpoint and test credentials
(OpenSSH ``SetEnv``), standing in for the store credentials a recipe's env gives a real instance.
"""

from __future__ import annotations

import os

import pytest
import yaml
from vast_double import VastDouble
from vast_helpers import API_KEY, BUCKET, MARKET, S3_CREDENTIALS, vast_settings

from launchpad.testing_ssh import LoopbackSshd


@pytest.fixture(scope="session")
def s3_url():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def vast_sshd(tmp_path_factory, s3_url):
    from launchpad.testing_ssh import SSHD

    if not os.path.exists(SSHD):
        pytest.skip("needs OpenSSH's sshd: apt-get install -y openssh-server")
    env = {"AWS_ENDPOINT_URL": s3_url, "HF_HUB_OFFLINE": "1", **S3_CREDENTIALS}
    server = LoopbackSshd(tmp_path_factory.mktemp("vast-sshd"), name="vast", env=env).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def vast_api(vast_sshd):
    double = VastDouble(MARKET, api_key=API_KEY, ssh_port=vast_sshd.port).start()
    yield double
    double.stop()


@pytest.fixture
def vast_env(vast_api, s3_url, monkeypatch, tmp_path):
    """A fresh double, the account's key in VAST_API_KEY, and an empty checkpoint bucket."""
    import urllib.request

    import boto3

    vast_api.reset()
    monkeypatch.setenv("VAST_API_KEY", API_KEY)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # never a developer's own ~/.config/vastai
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_url)
    for k, v in S3_CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    urllib.request.urlopen(urllib.request.Request(f"{s3_url}/moto-api/reset", method="POST"), timeout=10).read()
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    return vast_api


@pytest.fixture
def vast_config(tmp_path, vast_sshd, launchpad_home, vast_env):
    """The vast provider's settings, also written to the test home's config.yaml."""
    cfg = vast_settings(tmp_path, vast_sshd, vast_env.url)
    (launchpad_home / "config.yaml").write_text(yaml.safe_dump({"providers": {"vast": cfg}}))
    return cfg


@pytest.fixture
def vast(vast_config):
    from launchpad_vast import VastProvider

    provider = VastProvider(vast_config)
    yield provider
    provider.close()
