"""`up -> train -> checkpoint -> down` on moto's EC2 + S3 and a loopback sshd, in a network namespace with
only loopback: the scenarios of netns_faults.py, run by a pytest inside `unshare -n`. Nothing in there can
reach a real address, whatever a subprocess (agent, trainer, sshd) tries."""

from __future__ import annotations

from pathlib import Path

import pytest

from launchpad.testing_netns import run_scenarios_offline

HERE = Path(__file__).resolve().parent

pytestmark = [pytest.mark.slow, pytest.mark.sshd, pytest.mark.object_store]


def test_fault_scenarios_in_a_loopback_only_network_namespace(tmp_path):
    out = run_scenarios_offline(HERE / "netns_faults.py", tmp_path, passed=7, drop_env=("AWS_ENDPOINT_URL",), durations=10)
    print(out[-3000:])  # the inner run's durations, shown with -s
