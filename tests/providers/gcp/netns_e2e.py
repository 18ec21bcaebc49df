"""End-to-end scenarios of the gcp provider, run by test_gcp_e2e.py INSIDE a network namespace that has
only loopback (so the double's "external IPs" are unreachable rather than contacted). Not collected on its
own (the file name does not start with test_): run it through test_gcp_e2e.py.

The GCE double, gcp-storage-emulator, the sshd that plays every VM, the real CLI, agent and trainer all run
in there.
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
from gcp_helpers import PROJECT

from launchpad.errors import StorageError
from launchpad.state import StateDB
from launchpad.storage import open_store
from launchpad.storage.checkpoints import latest_checkpoint
from launchpad.testing_faults import kill_processes_naming

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.slow, pytest.mark.sshd, pytest.mark.object_store]


@pytest.fixture(autouse=True)
def only_loopback():
    if os.environ.get("LAUNCHPAD_NETNS") != "1":
        pytest.fail("run through tests/providers/gcp/test_gcp_e2e.py (inside a network namespace)")


@pytest.fixture
def instance_root(gcp_config):
    """The sshd "VM"'s launchpad root: whatever still runs under it when a test ends is killed, as deleting
    a real VM would."""
    root = Path(gcp_config["root"])
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


def bucket_of(zone: str) -> str:
    return f"gs://launchpad-{PROJECT}-{zone.rsplit('-', 1)[0]}/checkpoints"


def test_up_smoke_recipe_succeeds_after_a_stockout_with_its_checkpoint_in_gcs(run_cli, gcp_config, gce, instance_root,
                                                                              launchpad_home):
    """The issue's "done": `launchpad check` lists gcp, and `launchpad up recipes/smoke-lora.yaml --provider gcp`
    reaches SUCCEEDED from a fresh home; the first zone is out of GPUs (INJECTED), so it moves to another."""
    check = run_cli("check", "--json", check=True)
    row = next(r for r in json.loads(check.stdout)["providers"] if r["provider"] == "gcp")
    assert row["usable"] is True and row["detail"].startswith(f"project {PROJECT}: "), row
    gce.fail_next("POST", "instances", "ZONE_RESOURCE_POOL_EXHAUSTED",
                  "The zone does not have enough resources available to fulfill the request.")
    proc = run_cli("up", "recipes/smoke-lora.yaml", "--provider", "gcp", "--json", timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    job = json.loads(proc.stdout)
    assert job["state"] == "SUCCEEDED" and job["provider"] == "gcp" and job["step"] == 100
    db = StateDB(launchpad_home / "state.db")
    events = list(db.events(job["id"]))
    failed = [e["data"] for e in events if e["kind"] == "provision:failed"]
    ok = [e["data"] for e in events if e["kind"] == "provision:ok"]
    assert failed and failed[0]["scope"] == "zone" and ok and failed[0]["offer"] != ok[-1]["offer"], events
    zone = [b for m, p, b in gce.requests if m == "POST" and p.endswith("/instances")][-1]["machineType"].split("/")[1]
    ref = latest_checkpoint(open_store(bucket_of(zone)), job["id"])
    assert ref is not None and ref.step == 100 and job["last_checkpoint"] == ref.uri
    assert gce.live() == []  # deleted: nothing left billing
    shown = json.loads(run_cli("status", job["id"], "--json", check=True).stdout)
    row = shown[0] if isinstance(shown, list) else shown
    assert row["cost_usd"] > 0 and row["state"] == "SUCCEEDED"


def test_a_job_is_found_by_label_after_the_state_db_is_deleted(run_cli, launchpad_home, gce, tmp_path, instance_root):
    path = recipe(tmp_path, "gcp-orphan", steps=5000, every=1000)
    up = run_cli("up", str(path), "--provider", "gcp", "--detach", "--json", timeout=600)
    assert up.returncode == 0, up.stderr[-3000:]
    assert len(gce.live()) == 1
    (launchpad_home / "state.db").unlink()
    down = run_cli("down", "--all", "--json", timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert gce.live() == []
    assert run_cli("down", "--all", "--json", timeout=300).returncode == 0  # idempotent


def test_spot_preemption_resumes_on_the_next_offer_from_the_last_checkpoint(gce, tmp_path, instance_root, launchpad_home):
    path = recipe(tmp_path, "gcp-spot", steps=60, every=10, spot=True)
    env = {**os.environ, "LAUNCHPAD_HOME": str(launchpad_home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    up = subprocess.Popen([sys.executable, "-m", "launchpad", "up", str(path), "--provider", "gcp", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 600
        first = None
        while time.monotonic() < deadline:
            live = gce.live()
            if live and first is None:
                first = live[0]
            if first is not None:
                job = next(i["value"] for i in first["metadata"]["items"] if i["key"] == "launchpad-job")
                try:
                    ref = latest_checkpoint(open_store(bucket_of(first["zone"].rsplit("/", 1)[-1])), job)
                except StorageError:  # the default bucket is made at sync, after the VM
                    ref = None
                if ref is not None and ref.step >= 10:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("no checkpoint before the deadline")
        assert first is not None and first["scheduling"]["provisioningModel"] == "SPOT"
        # GCE reclaims the VM: a preempted operation, the VM deleted, and everything on it dies
        gce.preempt(first["name"])
        kill_processes_naming(instance_root / "jobs" / first["name"])
        out, err = up.communicate(timeout=900)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0, out[-2000:] + err[-4000:]
    job = json.loads(out)
    assert job["state"] == "SUCCEEDED" and job["step"] == 60
    db = StateDB(launchpad_home / "state.db")
    kinds = [e["kind"] for e in db.events(job["id"])]
    assert "preempted" in kinds and "auto-resume" in kinds
    tried = [e["data"]["offer"] for e in db.events(job["id"]) if e["kind"] == "provision:ok"]
    assert len(tried) == 2 and tried[0] != tried[1]  # the next offer, not the reclaimed one again
    resumes = [e["data"].get("checkpoint") for e in db.events(job["id"]) if e["kind"] == "resume"]
    assert resumes and resumes[-1] and "checkpoint-" in resumes[-1]  # from the last checkpoint, not step 0
    assert gce.live() == []
