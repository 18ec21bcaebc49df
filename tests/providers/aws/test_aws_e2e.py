"""`up -> train -> checkpoint -> down` on moto's EC2 + S3 and a loopback sshd, in a network namespace with
only loopback: the scenarios of netns_e2e.py, run by a pytest inside `unshare -n`. Nothing in there can
reach a real address, whatever a subprocess (agent, trainer, sshd) tries."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.sshd, pytest.mark.object_store]


def test_end_to_end_scenarios_in_a_loopback_only_network_namespace(tmp_path):
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.fail("needs util-linux's unshare and iproute2's ip (.ci/run installs them)")
    inner = (f"ip link set lo up && exec {sys.executable} -m pytest -q -p no:cacheprovider --timeout 900 --log-level=WARNING "
             f"--basetemp {tmp_path / 'inner'} {HERE / 'netns_e2e.py'}")
    env = {**os.environ, "LAUNCHPAD_NETNS": "1"}
    env.pop("AWS_ENDPOINT_URL", None)
    proc = subprocess.run(["unshare", "-n", "sh", "-c", inner], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=2400)
    # moto's access log fills the captured output: the failure itself is what a CI log must show
    out = "\n".join(line for line in proc.stdout.splitlines() if '" 200 -' not in line and '" 206 -' not in line)
    failures = out.find("= FAILURES =")
    report = (out[failures:failures + 12000] if failures >= 0 else out[-8000:]) + proc.stderr[-4000:]
    assert proc.returncode == 0, report
    assert "3 passed" in proc.stdout.splitlines()[-1], report
