"""End to end over SSH with the real CLI (`python -m launchpad ... --provider ssh`), the real agent and
trainer on a real sshd "host": up -> train -> checkpoint -> down, connections killed mid-run, `logs -f`
reconnecting, and the one-line errors for a wrong key and a changed host key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ssh_servers import host_entry, write_hosts

from launchpad.ssh.keys import generate_ed25519
from launchpad.storage import open_store
from launchpad.storage.checkpoints import latest_checkpoint

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.slow, pytest.mark.sshd]


def make_recipe(tmp_path: Path, name: str, steps: int, every: int, **extra) -> tuple[Path, str]:
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    ckpt = (tmp_path / "checkpoints").as_uri()
    data.update(name=name, max_steps=steps, **extra)
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    data["checkpoint"] = {"every_steps": every, "keep": 2, "uri": ckpt}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, ckpt


def cli_env(home: Path) -> dict:
    return {**os.environ, "LAUNCHPAD_HOME": str(home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}


def remote_step(sshd_pair) -> tuple[int, object, Path] | None:
    """(step, server, job dir) of the job training on one of the hosts, read from its status.json."""
    for server in sshd_pair:
        for status in (server.root / "jobs").glob("*/status.json"):
            try:
                return int(json.loads(status.read_text()).get("step") or 0), server, status.parent
            except (OSError, ValueError):
                continue
    return None


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def assert_released(sshd_pair):
    for server in sshd_pair:
        assert not (server.root / "claim").exists(), f"{server.name} is still claimed"
        assert not list((server.root / "jobs").glob("*")), f"{server.name} still has job directories"


def test_up_trains_checkpoints_survives_a_dropped_connection_and_goes_down(ssh_home, sshd_pair, tmp_path):
    marker = tmp_path / "pwned"
    weird = f"$(touch {marker}1) `touch {marker}2`; touch {marker}3 | cat 'q' \"d\" \\ * ~ !x"
    recipe, ckpt = make_recipe(tmp_path, "ssh-e2e", steps=24, every=8, env={"WEIRD": weird})
    up = subprocess.Popen([sys.executable, "-m", "launchpad", "up", str(recipe), "--provider", "ssh", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(ssh_home), cwd=REPO)
    try:
        step, server, _ = wait_for(lambda: (s := remote_step(sshd_pair)) and s[0] >= 3 and s, 180, "training to start")
        assert server.drop_connections() >= 1  # the client's connection dies mid-run
        out, err = up.communicate(timeout=240)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0, err
    job = json.loads(out)
    assert job["state"] == "SUCCEEDED" and job["provider"] == "ssh" and job["step"] == 24 > step
    ref = latest_checkpoint(open_store(ckpt), job["id"])
    assert ref is not None and ref.step == 24 and job["last_checkpoint"] == ref.uri
    assert_released(sshd_pair)
    assert not list(tmp_path.glob("pwned*")), "a recipe value was interpreted by a shell"
    down = subprocess.run([sys.executable, "-m", "launchpad", "down", job["id"]], capture_output=True, text=True,
                          env=cli_env(ssh_home), cwd=REPO, timeout=60)
    assert down.returncode == 0, down.stderr  # idempotent: already down


def test_detached_training_continues_and_logs_follow_reconnects(ssh_home, sshd_pair, tmp_path):
    recipe, ckpt = make_recipe(tmp_path, "ssh-detach", steps=30, every=10)
    env = cli_env(ssh_home)
    up = subprocess.run([sys.executable, "-m", "launchpad", "up", str(recipe), "--provider", "ssh", "--detach", "--json"],
                        capture_output=True, text=True, env=env, cwd=REPO, timeout=180)
    assert up.returncode == 0, up.stderr
    job_id = json.loads(up.stdout)["id"]
    follower = subprocess.Popen([sys.executable, "-m", "launchpad", "logs", job_id, "-f"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        step, server, jobdir = wait_for(lambda: (s := remote_step(sshd_pair)) and s[0] >= 5 and s, 180, "training")
        time.sleep(0.5)  # let the follower be streaming
        assert server.drop_connections() >= 1
        out, err = follower.communicate(timeout=240)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    assert "reconnecting" in err
    remote = (jobdir / "train.log").read_text().splitlines()
    got = out.splitlines()
    # nothing lost, nothing doubled across the reconnect (the agent may add a line after the end)
    assert got == remote[:len(got)] and len(remote) - len(got) <= 2, (got[-3:], remote[-3:])
    assert step < 30
    status = subprocess.run([sys.executable, "-m", "launchpad", "status", job_id, "--json"], capture_output=True,
                            text=True, env=env, cwd=REPO, timeout=120)
    assert status.returncode == 0, status.stderr
    row = json.loads(status.stdout)
    row = row[0] if isinstance(row, list) else row
    assert row["state"] == "SUCCEEDED" and row["step"] == 30
    assert latest_checkpoint(open_store(ckpt), job_id).step == 30
    assert_released(sshd_pair)


def test_a_wrong_key_and_a_changed_host_key_are_one_line_errors(launchpad_home, sshd_pair, client_key, tmp_path):
    recipe, _ = make_recipe(tmp_path, "ssh-bad", steps=2, every=1)
    stranger = tmp_path / "stranger"
    generate_ed25519(stranger)
    write_hosts(launchpad_home, [host_entry(sshd_pair[0], stranger)])
    proc = subprocess.run([sys.executable, "-m", "launchpad", "up", str(recipe), "--provider", "ssh"],
                          capture_output=True, text=True, env=cli_env(launchpad_home), cwd=REPO, timeout=120)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "authentication failed" in errors[0] and "host-a" in errors[0], proc.stderr

    generate_ed25519(tmp_path / "other-host")
    wrong = " ".join((tmp_path / "other-host.pub").read_text().split()[:2])
    write_hosts(launchpad_home, [host_entry(sshd_pair[0], client_key, host_key=wrong)])
    proc = subprocess.run([sys.executable, "-m", "launchpad", "up", str(recipe), "--provider", "ssh"],
                          capture_output=True, text=True, env=cli_env(launchpad_home), cwd=REPO, timeout=120)
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "host key of host-a" in errors[0] and "CHANGED" in errors[0], proc.stderr
    assert_released(sshd_pair)


def test_two_nodes_train_one_job_across_both_hosts(ssh_home, sshd_pair, tmp_path):
    recipe, ckpt = make_recipe(tmp_path, "ssh-2nodes", steps=8, every=4, resources={"nodes": 2})
    proc = subprocess.run([sys.executable, "-m", "launchpad", "up", str(recipe), "--provider", "ssh", "--json"],
                          capture_output=True, text=True, env=cli_env(ssh_home), cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)
    assert job["state"] == "SUCCEEDED" and job["step"] == 8
    log = (ssh_home / "logs" / job["id"]).glob("*.log")
    text = "\n".join(p.read_text() for p in log)
    assert "2 processes (1 per node)" in text and "written on other nodes" in text
    assert latest_checkpoint(open_store(ckpt), job["id"]).step == 8
    assert_released(sshd_pair)
    # both hosts were set up at the same time, not one after the other: their sync spans overlap
    from launchpad.state import StateDB

    synced = next(e["data"] for e in StateDB(ssh_home / "state.db").events(job["id"]) if e["kind"] == "synced")
    (a0, a1), (b0, b1) = ([min(s for s, _ in n["phases"].values()), max(e for _, e in n["phases"].values())]
                          for n in synced["nodes"])
    assert a0 < b1 and b0 < a1, synced["nodes"]
