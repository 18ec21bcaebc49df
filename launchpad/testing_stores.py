"""Real object-store servers on 127.0.0.1 for tests: gcp-storage-emulator (gs://) and Azurite (az://),
each in its own process on a free port. The storage tests' fixtures and the gcp/azure provider tests start
them through here; moto (s3://) has its own in-process server.

A server whose program is not installed raises `ServerMissing` with the command that installs it; the
fixtures turn that into a skip, or a failure under CI (CI=true), where everything is installed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BUCKET = "lp-test"
AZURITE_ACCOUNT = "devstoreaccount1"
# Azurite's published development key (the same in every Azurite install; not a secret).
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class ServerMissing(RuntimeError):
    """The server's program is not installed; the message names the install command."""


@dataclass
class Server:
    name: str
    endpoint: str  # http://127.0.0.1:PORT
    env: dict[str, str] = field(default_factory=dict)  # what a client needs to reach it
    proc: subprocess.Popen | None = None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def venv_script(name: str) -> str | None:
    beside = Path(sys.executable).with_name(name)
    return str(beside) if beside.exists() else shutil.which(name)


def start_process(name: str, argv_for_port, log_dir: Path, timeout: float = 60) -> tuple[subprocess.Popen, int]:
    """Start a server on a free loopback port and wait until it accepts connections (retrying
    on another port if the one picked was taken in between)."""
    for _attempt in range(3):
        port = free_port()
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
        stop_process(proc)
    tail = (log_dir / f"{name}.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"{name} did not start on 127.0.0.1:\n{tail}")


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start_gcs_emulator(log_dir: Path, *, bucket: str = BUCKET, project: str = "launchpad-test") -> Server:
    """gcp-storage-emulator, in memory, with `bucket` made. `env`: STORAGE_EMULATOR_HOST, GOOGLE_CLOUD_PROJECT."""
    script = venv_script("gcp-storage-emulator")
    if script is None:
        raise ServerMissing("gcp-storage-emulator is not installed (pip install gcp-storage-emulator)")

    def argv(port: int) -> list[str]:
        return [script, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "--default-bucket", bucket]

    proc, port = start_process("gcs", argv, log_dir)
    env = {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}", "GOOGLE_CLOUD_PROJECT": project}
    return Server("gs", f"http://127.0.0.1:{port}", env, proc)


def azurite_binary() -> str | None:
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


def start_azurite(work: Path, *, containers: tuple[str, ...] = (BUCKET,)) -> Server:
    """Azurite's blob service (telemetry off), `containers` made. `env`: AZURE_STORAGE_CONNECTION_STRING."""
    binary = azurite_binary()
    if binary is None:
        raise ServerMissing('Azurite is not installed (npm install --prefix "$HOME/.cache/lp-npm" azurite@3)')

    def argv(port: int) -> list[str]:
        return [
            binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", str(work),
            "--disableTelemetry", "--skipApiVersionCheck", "--silent",
        ]  # fmt: skip

    proc, port = start_process("azurite", argv, work)
    endpoint = f"http://127.0.0.1:{port}"
    server = Server("az", endpoint, {"AZURE_STORAGE_CONNECTION_STRING": azurite_connection_string(endpoint)}, proc)
    try:
        from azure.storage.blob import BlobServiceClient

        client = BlobServiceClient.from_connection_string(server.env["AZURE_STORAGE_CONNECTION_STRING"])
        for name in containers:
            client.create_container(name)
    except BaseException:
        server.stop()
        raise
    return server
