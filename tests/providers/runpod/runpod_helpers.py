"""Helpers of the runpod provider's tests: settings that point the provider at the GraphQL double and reach
every pod through the loopback sshd (its host key pinned), and offers to launch."""

from __future__ import annotations

import getpass
import sys
from dataclasses import replace
from pathlib import Path

BUCKET = "lp-runpod-test"
CHECKPOINTS = f"s3://{BUCKET}/checkpoints"
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def runpod_settings(tmp_path: Path, sshd, api_url: str) -> dict:
    return {
        "api_url": api_url, "key": str(sshd.client_key), "host_key": sshd.host_key_line(),
        "ssh_user": getpass.getuser(), "python": sys.executable, "root": str(tmp_path / "pod-root"),
        "connect_timeout": 20, "boot_timeout": 30, "checkpoint_uri": CHECKPOINTS,
        # never stop the test machine's pods for real: the idle watchdog's command only leaves a mark
        "shutdown_command": ["touch", str(tmp_path / "shutdown-requested")],
    }


def cheap_offer(provider, *, spot: bool = False, cloud: str = "secure", gpu: str | None = None):
    """The cheapest single-GPU offer of `cloud` (of GPU type `gpu` when given)."""
    offers = [o for o in provider.offers() if o.gpu_count == 1 and o.region == cloud
              and (gpu is None or o.instance_type == gpu) and (not spot or o.spot_price_per_hour)]
    return replace(min(offers, key=lambda o: (o.price_per_hour, o.instance_type)), spot=spot)
