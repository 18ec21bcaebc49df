"""Real object-store servers on 127.0.0.1 for the storage tests, one per session, each in its own
process: moto's S3 server, gcp-storage-emulator and Azurite (blob only, telemetry off).

`any_store` is a fresh, empty store on each of file://, s3://, gs:// and az:// in turn, rooted at a
unique prefix so tests never see each other's objects. A server whose program is not installed is
skipped with the command that installs it, except under CI (CI=true), where that is a failure:
CI installs them all, so a skip there would hide a broken install step.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest

BUCKET = "lp-test"
AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's published development key (the same in every Azurite install; not a secret).
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
STORES = ["file", "s3", "gs", "az"]


@dataclass
class Server:
    name: str
    endpoint: str  # http://127.0.0.1:PORT
    env: dict[str, str] = field(default_factory=dict)  # what a client needs to reach it


def _missing(what: str, install: str) -> NoReturn:
    message = f"{what} is not installed ({install})"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{message}: CI must install it", pytrace=False)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _venv_script(name: str) -> str | None:
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else shutil.which(name)


def _start(name: str, argv_for_port, log_dir: Path, timeout: float = 60) -> tuple[subprocess.Popen, int]:
    """Start a server on a free loopback port and wait until it accepts connections (retrying
    on another port if the one picked was taken in between)."""
    for _attempt in range(3):
        port = _free_port()
        log = open(log_dir / f"{name}.log", "wb")
        proc = subprocess.Popen(argv_for_port(port), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    return proc, port
            except OSError:
                time.sleep(0.1)
        _stop(proc)
    tail = (log_dir / f"{name}.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"{name} did not start on 127.0.0.1:\n{tail}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    script = _venv_script("moto_server")
    if script is None:
        _missing("moto's S3 server", "pip install 'moto[server]'")
    logs = tmp_path_factory.mktemp("moto")
    proc, port = _start("moto", lambda p: [script, "-H", "127.0.0.1", "-p", str(p)], logs)
    server = Server("s3", f"http://127.0.0.1:{port}", _s3_env(f"http://127.0.0.1:{port}", logs))
    try:
        with pytest.MonkeyPatch.context() as mp:
            for k, v in server.env.items():
                mp.setenv(k, v)
            import boto3

            boto3.session.Session().client("s3").create_bucket(Bucket=BUCKET)
        yield server
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory) -> Iterator[Server]:
    script = _venv_script("gcp-storage-emulator")
    if script is None:
        _missing("gcp-storage-emulator", "pip install gcp-storage-emulator")
    logs = tmp_path_factory.mktemp("gcs")

    def argv(port: int) -> list[str]:
        return [script, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "--default-bucket", BUCKET]

    proc, port = _start("gcs", argv, logs)
    env = {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}", "GOOGLE_CLOUD_PROJECT": "launchpad-test"}
    try:
        yield Server("gs", f"http://127.0.0.1:{port}", env)
    finally:
        _stop(proc)


def _azurite_binary() -> str | None:
    for candidate in (
        os.environ.get("LAUNCHPAD_AZURITE"),
        shutil.which("azurite-blob"),
        str(Path.home() / ".cache/lp-npm/node_modules/.bin/azurite-blob"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def azurite_connection_string(endpoint: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={endpoint}/{AZURITE_ACCOUNT};"
    )


@pytest.fixture(scope="session")
def azurite_server(tmp_path_factory) -> Iterator[Server]:
    binary = _azurite_binary()
    if binary is None:
        _missing("Azurite", 'npm install --prefix "$HOME/.cache/lp-npm" azurite@3')
    work = tmp_path_factory.mktemp("azurite")

    def argv(port: int) -> list[str]:
        return [
            binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(work),
            "--disableTelemetry", "--skipApiVersionCheck", "--silent",
        ]  # fmt: skip

    proc, port = _start("azurite", argv, work)
    endpoint = f"http://127.0.0.1:{port}"
    env = {"AZURE_STORAGE_CONNECTION_STRING": azurite_connection_string(endpoint)}
    try:
        from azure.storage.blob import BlobServiceClient

        BlobServiceClient.from_connection_string(env["AZURE_STORAGE_CONNECTION_STRING"]).create_container(BUCKET)
        yield Server("az", endpoint, env)
    finally:
        _stop(proc)


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
