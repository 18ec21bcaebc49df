"""Helpers of the azure provider's tests: settings that point the provider at the ARM double and map every VM
to the loopback sshd, and the cheap offers the tests provision."""

from __future__ import annotations

import getpass
import sys
from dataclasses import replace

from arm_double import SUBSCRIPTION

from launchpad.testing_ssh import LoopbackSshd

STORE = "az://lp-test/checkpoints"  # a container of Azurite's account (the connection string names it)


def azure_settings(tmp_path, sshd: LoopbackSshd, arm_url: str) -> dict:
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text(f"Host *\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {getpass.getuser()}\n")
    return {
        "subscription_id": SUBSCRIPTION, "endpoint": arm_url, "regions": ["eastus", "westus2"], "ssh_cidr": "127.0.0.1/32",
        "key": str(sshd.client_key), "ssh_config": str(ssh_config), "python": sys.executable,
        # one root for the session, as one image would have: its venv is made once, then reused by every VM
        "root": str(sshd.dir / "instance-root"), "connect_timeout": 20, "boot_timeout": 30, "poll_interval": 0.05,
        "delete_wait": 10, "checkpoint_uri": STORE,
    }


def cheap_offer(provider, *, spot: bool = False, region: str = "eastus"):
    """The cheapest single-GPU offer in `region`."""
    offers = [o for o in provider.offers() if o.region == region and o.gpu_count == 1]
    return replace(min(offers, key=lambda o: (o.price_per_hour, o.instance_type)), spot=spot)
