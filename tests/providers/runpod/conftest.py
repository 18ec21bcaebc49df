"""A RunPod GraphQL double (the real runpod SDK talks to it over loopback), one loopback sshd that plays every
pod (its port 22 is what the double maps each pod's port 22 to), and moto's S3 for the checkpoints.

The sshd of the end-to-end tests gets moto's endpoint and test credentials through its sessions' environment
(OpenSSH ``SetEnv``), standing in for the S3 credentials a recipe's `env:` gives a real pod."""

from __future__ import annotations

import os

import pytest
import yaml
from runpod_double import RunPodDouble
from runpod_helpers import BUCKET, S3_CREDENTIALS, runpod_settings

from launchpad.testing_ssh import SSHD, LoopbackSshd


@pytest.fixture(scope="session")
def runpod_api():
    double = RunPodDouble().start()
    yield double
    double.stop()


def _sshd(tmp_path_factory, name: str, env: dict):
    if not os.path.exists(SSHD):
        pytest.skip("needs OpenSSH's sshd: apt-get install -y openssh-server")
    return LoopbackSshd(tmp_path_factory.mktemp(name), name=name, env={"HF_HUB_OFFLINE": "1", **env}).start()


@pytest.fixture(scope="session")
def pod_sshd(tmp_path_factory):
    server = _sshd(tmp_path_factory, "runpod-sshd", {})
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_url():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="session")
def s3_pod_sshd(tmp_path_factory, moto_url):
    server = _sshd(tmp_path_factory, "runpod-s3-sshd", {"AWS_ENDPOINT_URL": moto_url, **S3_CREDENTIALS})
    yield server
    server.stop()


@pytest.fixture
def s3_store(moto_url, monkeypatch):
    """moto's S3 (reset) with the checkpoint bucket, and this process's boto3 pointed at it."""
    import urllib.request

    import boto3

    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST"), timeout=10).read()
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    for k, v in S3_CREDENTIALS.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    return moto_url


@pytest.fixture
def runpod_env(runpod_api, monkeypatch, tmp_path):
    """A fresh double, its API key in RUNPOD_API_KEY, and a HOME without ~/.runpod (the developer's is never read)."""
    runpod_api.reset()
    monkeypatch.setenv("RUNPOD_API_KEY", runpod_api.api_key)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RUNPOD_API_BASE_URL", runpod_api.url)  # restored after the test, whoever set it
    return runpod_api


def _configure(tmp_path, launchpad_home, double, sshd) -> dict:
    double.ssh = ("127.0.0.1", sshd.port)
    cfg = runpod_settings(tmp_path, sshd, double.url)
    (launchpad_home / "config.yaml").write_text(yaml.safe_dump({"providers": {"runpod": cfg}}))
    return cfg


@pytest.fixture
def runpod_config(tmp_path, pod_sshd, launchpad_home, runpod_env):
    """The runpod provider's settings, also written to the test home's config.yaml."""
    return _configure(tmp_path, launchpad_home, runpod_env, pod_sshd)


@pytest.fixture
def runpod_s3_config(tmp_path, s3_pod_sshd, launchpad_home, runpod_env, s3_store):
    """As runpod_config, with pods whose sessions reach moto's S3 (for trainers that upload checkpoints)."""
    return _configure(tmp_path, launchpad_home, runpod_env, s3_pod_sshd)


@pytest.fixture
def runpod(runpod_config):
    from launchpad_runpod import RunPodProvider

    provider = RunPodProvider(runpod_config)
    yield provider
    provider.close()
