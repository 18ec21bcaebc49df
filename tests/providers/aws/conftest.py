"""moto's server (EC2, S3, IAM, STS) on 127.0.0.1, and one loopback sshd that plays every EC2 instance.

moto hands out real-looking public addresses. They are never contacted: the test session refuses
non-loopback sockets, and the ssh config written here maps every host name to the sshd (``Host *`` with
``HostName 127.0.0.1`` and ``Port``), which is how a user reaches instances through a tunnel too. The
sshd's sessions get moto's endpoint and test credentials (OpenSSH ``SetEnv``), standing in for the
instance role a real EC2 instance would have, so the agent's S3 uploads land in moto.
"""

from __future__ import annotations

import os
import urllib.request

import pytest
import yaml
from aws_helpers import CREDENTIALS, aws_settings

from launchpad.testing_ssh import LoopbackSshd


@pytest.fixture(scope="session")
def moto_url():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws_env(moto_url, monkeypatch):
    """A fresh moto account (reset per test) and boto3 pointed at it."""
    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST"), timeout=10).read()
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    return moto_url


@pytest.fixture(scope="session")
def instance_sshd(tmp_path_factory, moto_url):
    from launchpad.testing_ssh import SSHD

    if not os.path.exists(SSHD):
        pytest.skip("needs OpenSSH's sshd: apt-get install -y openssh-server")
    env = {"AWS_ENDPOINT_URL": moto_url, "HF_HUB_OFFLINE": "1", **CREDENTIALS}
    server = LoopbackSshd(tmp_path_factory.mktemp("ec2-sshd"), name="ec2", env=env).start()
    yield server
    server.stop()


@pytest.fixture
def aws_config(tmp_path, instance_sshd, launchpad_home, aws_env):
    """The aws provider's settings, also written to the test home's config.yaml."""
    cfg = aws_settings(tmp_path, instance_sshd)
    (launchpad_home / "config.yaml").write_text(yaml.safe_dump({"providers": {"aws": cfg}}))
    return cfg


@pytest.fixture
def aws(aws_config):
    from launchpad_aws import AWSProvider

    provider = AWSProvider(aws_config)
    yield provider
    provider.close()


@pytest.fixture
def ec2(aws_env):
    import boto3

    return boto3.client("ec2", region_name="us-east-1")


