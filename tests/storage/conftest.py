"""Real object-store servers on 127.0.0.1 for the storage tests, one per session, each in its own
process: moto's S3 server, gcp-storage-emulator and Azurite (blob only, telemetry off).

`any_store` is a fresh, empty store on each of file://, s3://, gs:// and az:// in turn, rooted at a
unique prefix so tests never see each other's objects. A server whose program is not installed is
skipped with the command that installs it, except under CI (CI=true), where that is a failure:
CI installs them all, so a skip there would hide a broken install step.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from launchpad.testing_stores import (
    BUCKET,
    Server,
    ServerMissing,
    start_azurite,
    start_gcs_emulator,
    start_process,
    venv_script,
)

STORES = ["file", "s3", "gs", "az"]


def _missing(what: str) -> NoReturn:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{what}: CI must install it", pytrace=False)
    pytest.skip(what)


def _s3_env(endpoint: str, home: Path) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",  # never ask 169.254.169.254 for credentials
        "AWS_CONFIG_FILE": str(home / "aws-config"),  # never read the developer's profiles
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "aws-credentials"),
    }


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[Server]:
    script = venv_script("moto_server")
    if script is None:
        _missing("moto's S3 server is not installed (pip install 'moto[server]')")
    logs = tmp_path_factory.mktemp("moto")
    proc, port = start_process("moto", lambda p: [script, "-H", "127.0.0.1", "-p", str(p)], logs)
    server = Server("s3", f"http://127.0.0.1:{port}", _s3_env(f"http://127.0.0.1:{port}", logs), proc)
    try:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in server.env.items():
                mp.setenv(k, v)
            import boto3

            boto3.session.Session().client("s3").create_bucket(Bucket=BUCKET)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory) -> Iterator[Server]:
    try:
        server = start_gcs_emulator(tmp_path_factory.mktemp("gcs"))
    except ServerMissing as e:
        _missing(str(e))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory) -> Iterator[Server]:
    try:
        server = start_azurite(tmp_path_factory.mktemp("azurite"))
    except ServerMissing as e:
        _missing(str(e))
    try:
        yield server
    finally:
        server.stop()


_SERVER_FIXTURE = {"s3": "s3_server", "gs": "gcs_server", "az": "azurite_server"}


def store_uri(scheme: str, prefix: str) -> str:
    return f"{scheme}://{BUCKET}/{prefix}"


@pytest.fixture
def server_env(request, monkeypatch):
    """Point the SDKs at the local server of `request.param` (a scheme); returns the Server or None."""

    def point(scheme: str) -> Server | None:
        if scheme == "file":
            return None
        server: Server = request.getfixturevalue(_SERVER_FIXTURE[scheme])
        for k, v in server.env.items():
            monkeypatch.setenv(k, v)
        return server

    return point


@pytest.fixture(params=STORES)
def any_store(request, server_env, tmp_path):
    """An empty store of each kind, rooted at a fresh prefix."""
    from launchpad.storage import open_store

    scheme = request.param
    server_env(scheme)
    if scheme == "file":
        return open_store((tmp_path / "store").as_uri())
    return open_store(store_uri(scheme, f"t-{uuid.uuid4().hex[:12]}"))
