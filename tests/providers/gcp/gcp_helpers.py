"""Helpers of the gcp provider's tests: a service-account key whose self-signed tokens the GCE double
verifies (the real Application Default Credentials path, file and all), settings that map every VM to the
loopback sshd, and offers the double's zones can launch."""

from __future__ import annotations

import getpass
import json
import sys
from pathlib import Path

PROJECT = "lp-test-project"
ZONES = ["us-central1-a", "us-central1-b", "us-central1-c", "us-east1-c", "us-east4-c", "europe-west4-a"]


def service_account_key(path: Path, token_uri: str) -> str:
    """Write a service-account key file (a fresh RSA key) for GOOGLE_APPLICATION_CREDENTIALS; returns
    the PEM public key the double checks signatures with."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    path.write_text(json.dumps({
        "type": "service_account", "project_id": PROJECT, "private_key_id": "test-key-1", "private_key": private,
        "client_email": f"launchpad@{PROJECT}.iam.gserviceaccount.com", "client_id": "100000000000000000001",
        "token_uri": token_uri, "auth_uri": token_uri}))
    path.chmod(0o600)
    return public


def gcp_settings(tmp_path: Path, sshd, endpoint: str) -> dict:
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(f"Host *\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {getpass.getuser()}\n")
    return {
        "project": PROJECT, "endpoint": endpoint, "regions": ["us-central1", "us-east1", "us-east4", "europe-west4"],
        "ssh_cidr": "127.0.0.1/32", "key": str(sshd.client_key), "ssh_config": str(ssh_config),
        "python": sys.executable, "root": str(tmp_path / "instance-root"), "connect_timeout": 20, "boot_timeout": 30,
        # never halt the test machine: the idle watchdog's command only leaves a mark
        "shutdown_command": ["touch", str(tmp_path / "shutdown-requested")],
    }


def cheap_offer(provider, *, spot: bool = False, zone: str | None = None):
    """The cheapest single-GPU offer (in `zone` when given) among the double's zones."""
    from dataclasses import replace

    offers = [o for o in provider.offers() if o.gpu_count == 1 and (zone is None or o.zone == zone)]
    return replace(min(offers, key=lambda o: (o.price_per_hour, o.zone)), spot=spot)
