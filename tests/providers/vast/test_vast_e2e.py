"""`up -> train -> checkpoint -> down` on the Vast.ai double + moto's S3 and a loopback sshd, in a network
namespace with only loopback: the scenarios of netns_e2e.py, run by a pytest inside `unshare -n`. Nothing in
there can reach a real address, whatever a subprocess (agent, trainer, sshd) tries."""

from __future__ import annotations

from pathlib import Path

import pytest

from launchpad.testing_netns import run_scenarios_offline

HERE = Path(__file__).resolve().parent

pytestmark = [pytest.mark.slow, pytest.mark.sshd, pytest.mark.object_store]


def test_end_to_end_scenarios_in_a_loopback_only_network_namespace(tmp_path):
    run_scenarios_offline(HERE / "netns_e2e.py", tmp_path, passed=2, drop_env=("VAST_API_KEY", "AWS_ENDPOINT_URL"), timeout=1800)
