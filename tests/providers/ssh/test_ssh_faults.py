"""Teardown always wins over SSH (issue 10 items 1 and 6), with the real CLI, agent and trainer on real
sshd hosts, and `down` injected at a lifecycle point by launchpad.testing_faults's plugin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ssh_servers import host_entry, write_hosts
from test_ssh_e2e import REPO, assert_released, cli_env, make_recipe, remote_step, wait_for

from launchpad.testing_faults import fault_log, install_down_hook, processes_naming

pytestmark = pytest.mark.slow


def run(home: Path, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launchpad", *args], capture_output=True, text=True,
                          env={**cli_env(home), **(env or {})}, cwd=REPO, timeout=timeout)


def test_down_between_sync_and_train_leaves_no_orphan(ssh_home, sshd_pair, tmp_path):
    """Item 1: `down` after `up` synced the job (the work directory exists again on the host) and before
    the trainer starts: before the fix, `up` started the agent on the released host, set TRAINING, and no
    later `down` could find it. Now `up` stops with exit 1 and nothing runs on either host."""
    log = tmp_path / "faults.jsonl"
    env = install_down_hook(tmp_path / "site", "synced", log)
    recipe, _ = make_recipe(tmp_path, "ssh-race", steps=100000, every=50)
    up = run(ssh_home, "up", str(recipe), "--provider", "ssh", env=env)
    (fault,) = fault_log(log)
    assert fault["rc"] == 0, fault
    assert up.returncode == 1 and "torn down by `launchpad down`" in up.stderr, up.stdout + up.stderr
    assert "Traceback" not in up.stderr
    for server in sshd_pair:
        wait_for(lambda s=server: not processes_naming(s.root), 30, f"nothing running on {server.name}")
    assert_released(sshd_pair)
    again = json.loads(run(ssh_home, "down", "--all", "--json").stdout)
    assert again["terminated"] == []
    job = json.loads(run(ssh_home, "status", fault["job"], "--json").stdout)[0]
    assert job["state"] == "INTERRUPTED"


def test_a_renamed_host_is_never_reported_terminated(ssh_home, sshd_pair, client_key, tmp_path):
    """Item 6: renaming the host in hosts.yaml used to make `status` say INTERRUPTED "(preempted?)" and
    `down` print "terminated" while the agent kept training. Now: renamed, `down` finds the job by its
    claim under the new name and stops it; removed, it is UNKNOWN and `down` says it may still run."""
    recipe, _ = make_recipe(tmp_path, "ssh-rename", steps=100000, every=50)
    up = run(ssh_home, "up", str(recipe), "--provider", "ssh", "--detach", "--json")
    assert up.returncode == 0, up.stderr
    job_id = json.loads(up.stdout)["id"]
    _, server, _ = wait_for(lambda: remote_step(sshd_pair), 180, "training to start")
    others = [host_entry(s, client_key) for s in sshd_pair if s is not server]

    write_hosts(ssh_home, others)  # the host is gone from hosts.yaml altogether
    row = json.loads(run(ssh_home, "status", job_id, "--json").stdout)[0]
    assert row["state"] == "TRAINING", row  # not INTERRUPTED "(preempted?)": nobody knows it stopped
    down = run(ssh_home, "down", job_id)
    assert down.returncode == 1 and "may still be running" in down.stderr, down.stdout + down.stderr
    assert processes_naming(server.root), "it is still running, as `down` said"

    write_hosts(ssh_home, [*others, host_entry(server, client_key, name=f"{server.name}-renamed")])
    down = run(ssh_home, "down", job_id, "--json")
    assert down.returncode == 0, down.stderr
    assert len(json.loads(down.stdout)["terminated"]) == 1
    wait_for(lambda: not processes_naming(server.root), 30, "the agent and trainer to stop")
    assert_released(sshd_pair)
    hosts = yaml.safe_load((ssh_home / "hosts.yaml").read_text())["hosts"]
    assert any(h["name"].endswith("-renamed") for h in hosts)
