"""Issue 13's recovery scenarios (netns_recover.py) on moto + the loopback sshd, inside a loopback-only
network namespace, like test_aws_e2e.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from launchpad.testing_netns import run_scenarios_offline

HERE = Path(__file__).resolve().parent

pytestmark = [pytest.mark.slow, pytest.mark.sshd, pytest.mark.object_store]


def test_recovery_scenarios_in_a_loopback_only_network_namespace(tmp_path):
    run_scenarios_offline(HERE / "netns_recover.py", tmp_path, passed=2, drop_env=("AWS_ENDPOINT_URL",))
