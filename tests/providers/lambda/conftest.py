"""A Lambda Cloud API double (the provider's own HTTP client talks to it over loopback), moto's S3 for the
checkpoints (Lambda has no object store: the provider's `checkpoint_uri` points there), and one loopback sshd
that plays every instance.

The double hands out documentation addresses (198.51.100.x) as the instances' public IPs. They are never
contacted: the test session refuses non-loopback sockets, and the ssh config written here maps every host
name to the sshd. The sshd's sessions get moto's endpoint and test credentials (OpenSSH ``SetEnv``), as a
user's Lambda instance would get its store's credentials, so the agent's S3 uploads land in moto.
"""

from __future__ import annotations

import os
import urllib.request

import pytest
import yaml
from lambda_double import LambdaDouble
from lambda_helpers import API_KEY, BUCKET, CREDENTIALS, lambda_settings

from launchpad.testing_ssh import LoopbackSshd


@pytest.fixture(scope="session")
def lambda_api():
    double = LambdaDouble(API_KEY).start()
    yield double
    double.stop()


@pytest.fixture(scope="session")
def moto_url():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def instance_sshd(tmp_path_factory, moto_url):
    from launchpad.testing_ssh import SSHD

    if not os.path.exists(SSHD):
        pytest.skip("needs OpenSSH's sshd: apt-get install -y openssh-server")
    env = {"AWS_ENDPOINT_URL": moto_url, "HF_HUB_OFFLINE": "1", **CREDENTIALS}
    server = LoopbackSshd(tmp_path_factory.mktemp("lambda-sshd"), name="lambda", env=env).start()
    yield server
    server.stop()


@pytest.fixture
def lambda_env(lambda_api, moto_url, monkeypatch):
    """A fresh double and moto (the checkpoint bucket made), the key in LAMBDA_API_KEY, boto3 at moto."""
    import boto3

    lambda_api.reset()
    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST"), timeout=10).read()
    monkeypatch.setenv("LAMBDA_API_KEY", API_KEY)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    for k, v in CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    return lambda_api


@pytest.fixture
def lambda_config(tmp_path, instance_sshd, launchpad_home, lambda_env):
    """The lambda provider's settings, also written to the test home's config.yaml."""
    cfg = lambda_settings(tmp_path, instance_sshd, lambda_env.url)
    (launchpad_home / "config.yaml").write_text(yaml.safe_dump({"providers": {"lambda": cfg}}))
    return cfg


@pytest.fixture
def lambda_provider(lambda_config):
    from launchpad_lambda import LambdaProvider

    provider = LambdaProvider(lambda_config)
    yield provider
    provider.close()
