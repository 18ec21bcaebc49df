"""A missed heartbeat alone never ends a healthy run: the host's sshd is really down for longer than a
status check interval while `up --recover` follows the job; the run goes on and succeeds on the same host."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from test_ssh_e2e import REPO, assert_released, cli_env, make_recipe, remote_step, wait_for

from launchpad.lifecycle import POLL_SECONDS, STATUS_EVERY_POLLS

pytestmark = [pytest.mark.slow, pytest.mark.sshd]


def test_an_unreachable_heartbeat_does_not_end_a_healthy_run(ssh_home, sshd_pair, tmp_path):
    recipe, _ = make_recipe(tmp_path, "ssh-blip", steps=400, every=200)
    up = subprocess.Popen([sys.executable, "-m", "launchpad", "up", str(recipe), "--provider", "ssh", "--recover",
                           "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=cli_env(ssh_home), cwd=REPO)
    try:
        step, server, _ = wait_for(lambda: (s := remote_step(sshd_pair)) and s[0] >= 3 and s, 180, "training to start")
        server.drop_connections()  # the client's connection dies ...
        server.stop()  # ... and no new one is accepted: progress() and status() both fail to reach the host
        time.sleep(STATUS_EVERY_POLLS * POLL_SECONDS * 2.5)  # at least one status check falls in the outage
        server.start()
        out, err = up.communicate(timeout=420)  # a loaded CI machine trains slowly
    finally:
        if up.poll() is None:
            up.kill()
            print(up.communicate()[1][-3000:])
        if server.proc is None:
            server.start()
    assert up.returncode == 0, err
    job = json.loads(out)
    assert job["state"] == "SUCCEEDED" and job["step"] == 400
    from launchpad.state import StateDB

    db = StateDB(ssh_home / "state.db")
    kinds = [e["kind"] for e in db.events(job["id"])]
    # the outage was ridden out (by the transport's reconnect, or as a missed heartbeat): never acted on
    assert "auto-resume" not in kinds and "lost" not in kinds and "state:INTERRUPTED" not in kinds
    assert kinds.count("provision:ok") == 1  # the same instance throughout
    assert_released(sshd_pair)
