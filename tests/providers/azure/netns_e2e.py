"""End-to-end scenarios of the azure provider, run by test_azure_e2e.py INSIDE a network namespace that has
only loopback (so the double's TEST-NET "public IPs" are unreachable rather than contacted). Not collected
on its own (the file name does not start with test_): run it through test_azure_e2e.py.

The ARM double (with its IMDS token endpoint), Azurite, the sshd that plays every VM, and the real CLI, agent
and trainer all run in there.
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
from azure_helpers import STORE

from launchpad.storage import open_store
from launchpad.storage.checkpoints import latest_checkpoint
from launchpad.testing_faults import kill_processes_naming

REPO = Path(__file__).resolve().parents[3]
KINDS = ("virtualMachines", "disks", "networkInterfaces", "publicIPAddresses", "networkSecurityGroups")

pytestmark = [pytest.mark.slow, pytest.mark.sshd, pytest.mark.object_store]


@pytest.fixture(autouse=True)
def only_loopback():
    if os.environ.get("LAUNCHPAD_NETNS") != "1":
        pytest.fail("run through tests/providers/azure/test_azure_e2e.py (inside a network namespace)")


@pytest.fixture
def instance_root(azure_config):
    """The sshd "VM"'s launchpad root: whatever still runs under it when a test ends is killed, as deleting a
    real VM would."""
    root = Path(azure_config["root"])
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


def left(arm, job_id: str | None = None) -> list[str]:
    """Every job resource (VM, disk, NIC, IP, NSG) still there, and every role assignment."""
    return sorted(r["name"] for kind in KINDS for r in arm.of_type(kind)
                  if job_id is None or (r.get("tags") or {}).get("launchpad-job") == job_id) + \
        (sorted(arm.role_assignments) if job_id is None else [])


def test_up_smoke_recipe_succeeds_with_its_checkpoint_in_azurite(run_cli, arm, instance_root):
    """The issue's "done": `launchpad up recipes/smoke-lora.yaml --provider azure` from a fresh home."""
    proc = run_cli("up", "recipes/smoke-lora.yaml", "--provider", "azure", "--json", timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    job = json.loads(proc.stdout)
    assert job["state"] == "SUCCEEDED" and job["provider"] == "azure" and job["step"] == 100
    ref = latest_checkpoint(open_store(STORE), job["id"])
    assert ref is not None and ref.step == 100 and job["last_checkpoint"] == ref.uri
    assert left(arm) == []  # no VM, NIC, IP, disk, NSG or role assignment: nothing bills
    shown = json.loads(run_cli("status", job["id"], "--json", check=True).stdout)
    row = shown[0] if isinstance(shown, list) else shown
    assert row["cost_usd"] > 0 and row["state"] == "SUCCEEDED"  # the offer's price x the VM's time, plus its disk


def test_a_job_is_found_by_tag_after_the_state_db_is_deleted(run_cli, arm, launchpad_home, tmp_path, instance_root):
    path = recipe(tmp_path, "azure-orphan", steps=5000, every=1000)
    up = run_cli("up", str(path), "--provider", "azure", "--detach", "--json", timeout=600)
    assert up.returncode == 0, up.stderr[-3000:]
    job_id = json.loads(up.stdout)["id"]
    assert len([r for r in arm.of_type("virtualMachines") if r["tags"]["launchpad-job"] == job_id]) == 1
    (launchpad_home / "state.db").unlink()
    down = run_cli("down", "--all", "--json", timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert left(arm) == []
    assert run_cli("down", "--all", "--json", timeout=300).returncode == 0  # idempotent


def test_spot_eviction_resumes_on_the_next_offer_from_the_last_checkpoint(arm, azure, tmp_path, instance_root,
                                                                          launchpad_home):
    path = recipe(tmp_path, "azure-spot", steps=80, every=5, spot=True)
    env = {**os.environ, "LAUNCHPAD_HOME": str(launchpad_home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    up = subprocess.Popen([sys.executable, "-m", "launchpad", "up", str(path), "--provider", "azure", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 600
        first = None
        while time.monotonic() < deadline:
            vms = arm.of_type("virtualMachines")
            if vms and first is None:
                first = vms[0]
            if first is not None:
                ref = latest_checkpoint(open_store(STORE), first["tags"]["launchpad-job"])
                if ref is not None and ref.step >= 5:
                    break
            time.sleep(0.2)
        else:
            pytest.fail("no checkpoint before the deadline")
        assert first is not None and first["properties"]["priority"] == "Spot"
        # Azure evicts the VM (the real simulateEviction action): evictionPolicy Delete takes it and its disk, and
        # everything on it dies
        azure.account.compute.virtual_machines.simulate_eviction("launchpad-" + first["location"], first["name"])
        arm.settle()  # the eviction has happened: now the machine's processes die with it
        kill_processes_naming(instance_root / "jobs" / first["name"])
        out, err = up.communicate(timeout=900)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0, out[-2000:] + err[-4000:]
    job = json.loads(out)
    assert job["state"] == "SUCCEEDED" and job["step"] == 80
    from launchpad.state import StateDB

    db = StateDB(launchpad_home / "state.db")
    kinds = [e["kind"] for e in db.events(job["id"])]
    assert "preempted" in kinds and "auto-resume" in kinds
    tried = [e["data"]["offer"] for e in db.events(job["id"]) if e["kind"] == "provision:ok"]
    assert len(tried) == 2 and tried[0] != tried[1]  # the next offer, not the reclaimed one again
    resumes = [e["data"].get("checkpoint") for e in db.events(job["id"]) if e["kind"] == "resume"]
    assert resumes and resumes[-1] and "checkpoint-" in resumes[-1]  # from the last checkpoint, not step 0
    assert left(arm) == []
