"""A two-node job whose second host fails before its trainer joins the first: the job ends with that host's
cause within a minute, and nothing stays claimed or running on either host.

The failure is real: host-b's job directories live on a 200 KiB tmpfs, room for the synced job files but not
for the agent's disk reserve, so its agent ends with "disk full" before it starts a trainer (a BYO host with a
full disk). Rank 0's torchrun meanwhile waits in its static rendezvous, 600 s by default, every GPU billing;
launchpad used to read only rank 0 and waited with it (launchpad.vm_progress)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from test_ssh_e2e import REPO, assert_released, cli_env, make_recipe

from launchpad.testing_faults import full_disk, kill_processes_naming, processes_naming
from launchpad.vm_progress import PEER_END_GRACE_S

pytestmark = [pytest.mark.slow, pytest.mark.sshd]


@pytest.fixture
def small_jobs_disk(sshd_pair):
    disk = full_disk(sshd_pair[1].root / "jobs", "200k", fill=False)
    try:
        jobs = disk.__enter__()
    except RuntimeError as e:  # no root, or no tmpfs here
        pytest.skip(str(e))
    yield jobs
    for server in sshd_pair:  # only if the test failed: never leave its processes behind
        kill_processes_naming(server.root)
    disk.__exit__(None, None, None)


def test_a_host_that_fails_before_joining_ends_the_job_with_its_cause(ssh_home, sshd_pair, small_jobs_disk, tmp_path):
    recipe, _ = make_recipe(tmp_path, "ssh-2nodes-full", steps=8, every=4, resources={"nodes": 2})
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "launchpad", "up", str(recipe), "--provider", "ssh", "--json"],
                          capture_output=True, text=True, env=cli_env(ssh_home), cwd=REPO, timeout=300)
    took = time.monotonic() - t0
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "disk full: No space left on device" in errors[0], proc.stderr[-3000:]
    assert "(on node 1 (" in errors[0] and str(small_jobs_disk) in errors[0], errors[0]  # where, and which host
    assert took < PEER_END_GRACE_S + 60, took  # not torchrun's 600 s rendezvous timeout
    assert_released(sshd_pair)
    for server in sshd_pair:  # rank 0's agent and torchrun, still in their rendezvous, were stopped
        assert processes_naming(server.root) == [], server.name
    shown = json.loads(subprocess.run([sys.executable, "-m", "launchpad", "status", "--json"], capture_output=True,
                                      text=True, env=cli_env(ssh_home), cwd=REPO, check=True).stdout)
    assert shown[0]["state"] == "FAILED" and "disk full" in shown[0]["error"], shown
