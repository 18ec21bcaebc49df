"""End-to-end scenarios of the vast provider, run by test_vast_e2e.py INSIDE a network namespace that has only
loopback (so the double's proxy names and TEST-NET addresses are unreachable rather than contacted). Not
collected on its own (the file name does not start with test_): run it through test_vast_e2e.py.

The Vast.ai double, moto's S3 (the checkpoint store: Vast has none), the sshd that plays every rented machine,
the real CLI, agent and trainer all run in there. Two training runs in all, 30 and 40 steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from vast_helpers import CHECKPOINTS, OLD_DRIVER

from launchpad.state import StateDB
from launchpad.storage import open_store
from launchpad.storage.checkpoints import latest_checkpoint
from launchpad.testing_faults import kill_processes_naming

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.slow, pytest.mark.sshd, pytest.mark.object_store]


@pytest.fixture(autouse=True)
def only_loopback():
    if os.environ.get("LAUNCHPAD_NETNS") != "1":
        pytest.fail("run through tests/providers/vast/test_vast_e2e.py (inside a network namespace)")


@pytest.fixture
def instance_root(vast_config):
    """The sshd "machine"'s launchpad root: whatever still runs under it when a test ends is killed, as
    destroying a real instance would."""
    root = Path(vast_config["root"])
    yield root
    kill_processes_naming(root)


def recipe(tmp_path: Path, name: str, steps: int, every: int, **resources) -> Path:
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    data.update(name=name, max_steps=steps)
    data["checkpoint"] = {"every_steps": every, "keep": 2}
    if resources:
        data["resources"] = resources
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_up_the_smoke_recipe_succeeds_with_its_checkpoint_in_the_store(run_cli, vast_config, vast_api, instance_root,
                                                                     tmp_path, launchpad_home):
    """The issue's "done": `launchpad up <smoke recipe> --provider vast` reaches SUCCEEDED with its checkpoint in
    the store and nothing left renting; the cheapest host runs no image, so it moves to the next offer."""
    path = recipe(tmp_path, "vast-smoke", steps=30, every=10)
    proc = run_cli("up", str(path), "--provider", "vast", "--json", timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    job = json.loads(proc.stdout)
    assert job["state"] == "SUCCEEDED" and job["provider"] == "vast" and job["step"] == 30
    ref = latest_checkpoint(open_store(CHECKPOINTS), job["id"])
    assert ref is not None and ref.step == 30 and job["last_checkpoint"] == ref.uri
    events = list(StateDB(launchpad_home / "state.db").events(job["id"]))
    failed = [e["data"] for e in events if e["kind"] == "provision:failed"]
    assert failed and f"machine-{OLD_DRIVER}" in failed[0]["offer"] and failed[0]["scope"] == "offer", events
    assert vast_api.live() == []  # destroyed: nothing left billing


def test_an_outbid_instance_is_preempted_and_resumed_from_the_last_checkpoint(vast_api, vast_config, tmp_path,
                                                                           instance_root, launchpad_home):
    path = recipe(tmp_path, "vast-bid", steps=80, every=10, spot=True)
    env = {**os.environ, "LAUNCHPAD_HOME": str(launchpad_home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    up = subprocess.Popen([sys.executable, "-m", "launchpad", "up", str(path), "--provider", "vast", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 600
        first = None
        while time.monotonic() < deadline:
            live = vast_api.live()
            if live and first is None:
                first = live[0]
            if first is not None:
                job_id = first["label"].split()[1].removeprefix("job=")
                ref = latest_checkpoint(open_store(CHECKPOINTS), job_id)
                if ref is not None and ref.step >= 10:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("no checkpoint before the deadline")
        assert first is not None and first["is_bid"] and first["dph_base"] > 0  # an interruptible rental, bid placed
        # a higher bid takes the host: Vast pauses the container, so everything in it stops at once
        vast_api.outbid(first["id"])
        kill_processes_naming(instance_root / "jobs" / str(first["id"]))
        out, err = up.communicate(timeout=900)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0, out[-2000:] + err[-4000:]
    job = json.loads(out)
    assert job["state"] == "SUCCEEDED" and job["step"] == 80
    events = list(StateDB(launchpad_home / "state.db").events(job["id"]))
    kinds = [e["kind"] for e in events]
    assert "preempted" in kinds and "auto-resume" in kinds, kinds
    tried = [e["data"]["offer"] for e in events if e["kind"] == "provision:ok"]
    assert len(tried) == 2 and tried[0] != tried[1]  # another host, not the one that outbid us
    resumes = [e["data"].get("checkpoint") for e in events if e["kind"] == "resume"]
    assert resumes and resumes[-1] and "checkpoint-" in resumes[-1]  # from the last checkpoint, not step 0
    assert vast_api.live() == []  # the paused instance was destroyed too
