"""Helpers of the lambda provider's tests: the test account's key, settings that map every instance to the
loopback sshd, the checkpoint bucket in moto, and offers the double can launch."""

from __future__ import annotations

import getpass
import sys
from pathlib import Path

API_KEY = "secret_lp-test_5f0c1e2d3a4b"  # the double's account key (shaped like Lambda's)
BUCKET = "lp-lambda-checkpoints"
CHECKPOINTS = f"s3://{BUCKET}/launchpad"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def lambda_settings(tmp_path: Path, sshd, api_url: str) -> dict:
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(f"Host *\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {getpass.getuser()}\n")
    return {
        "api_url": api_url, "checkpoint_uri": CHECKPOINTS, "key": str(sshd.client_key), "ssh_config": str(ssh_config),
        "python": sys.executable, "root": str(tmp_path / "instance-root"), "connect_timeout": 20, "boot_timeout": 30,
        "poll_seconds": 0.1,
    }


def cheap_offer(provider, *, gpu: str | None = None, region: str | None = None):
    """The cheapest single-GPU offer (of `gpu`, in `region` when given)."""
    offers = [o for o in provider.offers() if o.gpu_count == 1 and (gpu is None or o.gpu == gpu)
              and (region is None or o.region == region)]
    return min(offers, key=lambda o: (o.price_per_hour, o.region))
