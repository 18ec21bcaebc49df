"""`up -> train -> checkpoint -> down` on the Kubernetes API double (pods as local processes, the agent
started in them through the exec websocket), in a network namespace with only loopback: the scenarios of
netns_e2e.py, run by a pytest inside `unshare -n`, so nothing a subprocess (agent, trainer) tries can
reach a real address."""

from __future__ import annotations

from pathlib import Path

import pytest

from launchpad.testing_netns import run_scenarios_offline

HERE = Path(__file__).resolve().parent

pytestmark = [pytest.mark.slow]


def test_end_to_end_scenarios_in_a_loopback_only_network_namespace(tmp_path):
    run_scenarios_offline(HERE / "netns_e2e.py", tmp_path, passed=3, drop_env=("KUBECONFIG",), inner_timeout=600, timeout=1200)
