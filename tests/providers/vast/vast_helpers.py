"""Helpers of the vast provider's tests: the market the double sells, settings that map every rented machine
to the loopback sshd (its host key pinned), and the moto bucket the checkpoints go to."""

from __future__ import annotations

import getpass
import sys
from dataclasses import replace

from vast_double import machine

API_KEY = "vast-test-key-0123456789abcdef"
BUCKET = "lp-vast-checkpoints"
CHECKPOINTS = f"s3://{BUCKET}/checkpoints"
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}

RELIABLE, SHAKY, A6000, OLD_DRIVER, H100 = 101, 102, 103, 104, 105
MARKET = [
    machine(RELIABLE, "RTX 4090", dph_base=0.400, min_bid=0.20, reliability=0.995, cuda_max_good=12.8),
    # a hair cheaper (0.5%: within the planner's tie_pct), far less reliable
    machine(SHAKY, "RTX 4090", dph_base=0.398, min_bid=0.19, reliability=0.80, cuda_max_good=12.8,
            geolocation="Oregon, US"),
    machine(A6000, "RTX A6000", gpu_ram_gb=48, dph_base=0.45, min_bid=None, reliability=0.97, cuda_max_good=12.4,
            geolocation="Romania, RO", disk_bw=600, inet_down=300),
    # cheapest of all, but its driver runs no image on the list (CUDA 11.2 < 11.8): provision skips it
    machine(OLD_DRIVER, "RTX 3090", dph_base=0.15, min_bid=0.08, reliability=0.99, cuda_max_good=11.2,
            geolocation="Ontario, CA"),
    machine(H100, "H100 SXM", gpu_ram_gb=80, dph_base=1.80, min_bid=1.0, reliability=0.999, cuda_max_good=12.9,
            geolocation="Florida, US"),
]


def vast_settings(tmp_path, sshd, url: str) -> dict:
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("Host *\n  HostName 127.0.0.1\n")  # every proxy name (sshN.vast.ai) -> the sshd
    return {
        "url": url, "key": str(sshd.client_key), "ssh_config": str(ssh_config), "ssh_user": getpass.getuser(),
        "host_key": sshd.host_key_line(),  # the loopback sshd's key, pinned (the double runs no onstart script)
        "python": sys.executable, "root": str(tmp_path / "instance-root"), "connect_timeout": 20,
        "boot_timeout": 30, "host_key_wait": 2, "checkpoint_uri": CHECKPOINTS,
        "min_reliability": 0.7,  # lets the shaky host (0.80) into the market: the planner is to rank it last
    }


def offer_on(provider, machine_id: int, *, spot: bool = False):
    """The live offer of one machine of the double's market."""
    offer = next(o for o in provider.offers() if o.zone == f"machine-{machine_id}")
    return replace(offer, spot=spot)
