"""End-to-end scenarios of the kubernetes provider, run by test_kubernetes_e2e.py INSIDE a network namespace
that has only loopback. Not collected on its own (the file name does not start with test_).

The API double (its pods are local processes: the bootstrap as PID "1", then the agent and trainer that
launchpad starts through the exec websocket), the real CLI, agent and trainer all run in there; checkpoints
go to a file:// store, which the "pod" can reach because it is this machine.
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
from kube_double import pod_processes

from launchpad.state import StateDB
from launchpad.storage import open_store
from launchpad.storage.checkpoints import latest_checkpoint

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.slow]


@pytest.fixture(autouse=True)
def only_loopback():
    if os.environ.get("LAUNCHPAD_NETNS") != "1":
        pytest.fail("run through tests/providers/kubernetes/test_kubernetes_e2e.py (inside a network namespace)")


def recipe(tmp_path: Path, name: str, steps: int, every: int) -> Path:
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    data.update(name=name, max_steps=steps)
    data["checkpoint"] = {"every_steps": every, "keep": 2}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def no_pod_processes(kube) -> bool:
    return not any(pod_processes(uid) for uid in list(kube.procs))


def test_up_smoke_recipe_succeeds_with_the_agent_in_the_pod_and_the_checkpoint_in_the_store(run_cli, kube_config, kube,
                                                                                            launchpad_home):
    """The issue's "done": `launchpad up recipes/smoke-lora.yaml --provider kubernetes` reaches SUCCEEDED."""
    check = run_cli("check", "--json", check=True)
    row = next(r for r in json.loads(check.stdout)["providers"] if r["provider"] == "kubernetes")
    assert row["usable"] is True and row["detail"].startswith("context gpu-cluster (namespace ml"), row
    proc = run_cli("up", "recipes/smoke-lora.yaml", "--provider", "kubernetes", "--json", timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    job = json.loads(proc.stdout)
    assert job["state"] == "SUCCEEDED" and job["provider"] == "kubernetes" and job["step"] == 100
    ref = latest_checkpoint(open_store(kube_config["checkpoint_uri"]), job["id"])
    assert ref is not None and ref.step == 100 and job["last_checkpoint"] == ref.uri
    posted = [b for m, p, b in kube.requests if m == "POST" and p.endswith("/jobs")]
    assert len(posted) == 1 and posted[0]["metadata"]["labels"]["launchpad-job"] == job["id"]
    execs = [p for m, p, _ in kube.requests if p.endswith("/exec")]
    assert execs  # sync, train, progress, logs and checkpoint went through the exec websocket
    assert kube.jobs() == [] and kube.pods() == []  # deleted with its pod: nothing holds a GPU
    assert no_pod_processes(kube)


def test_a_job_is_found_by_label_after_the_state_db_is_deleted(run_cli, launchpad_home, kube, kube_config, tmp_path):
    path = recipe(tmp_path, "k8s-orphan", steps=5000, every=1000)
    up = run_cli("up", str(path), "--provider", "kubernetes", "--detach", "--json", timeout=600)
    assert up.returncode == 0, up.stderr[-3000:]
    assert len(kube.jobs()) == 1
    (launchpad_home / "state.db").unlink()
    down = run_cli("down", "--all", "--json", timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert kube.jobs() == [] and kube.pods() == []
    assert no_pod_processes(kube)
    assert run_cli("down", "--all", "--json", timeout=300).returncode == 0  # idempotent


def test_pod_deletion_is_a_preemption_resumed_from_the_last_checkpoint(kube, kube_config, tmp_path, launchpad_home):
    # an idle machine trains ~20 steps/s: enough steps that the eviction lands mid-run, not after the last
    path = recipe(tmp_path, "k8s-preempt", steps=150, every=10)
    env = {**os.environ, "LAUNCHPAD_HOME": str(launchpad_home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    up = subprocess.Popen([sys.executable, "-m", "launchpad", "up", str(path), "--provider", "kubernetes", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    store = open_store(kube_config["checkpoint_uri"])
    try:
        deadline = time.monotonic() + 400
        first = None
        while time.monotonic() < deadline:
            jobs = kube.jobs()
            if jobs and first is None:
                first = jobs[0]
            if first is not None:
                job_id = first["metadata"]["annotations"]["launchpad.dev/job-id"]
                ref = latest_checkpoint(store, job_id)
                if ref is not None and ref.step >= 10:
                    break
            time.sleep(0.5)
        else:
            pytest.fail("no checkpoint before the deadline")
        assert first is not None
        pod = next(p for p in kube.pods() if p["metadata"]["labels"]["job-name"] == first["metadata"]["name"])
        status, _ = kube.evict(pod)  # the node is drained: the eviction API, a graceful delete of the pod
        assert status == 201
        out, err = up.communicate(timeout=600)
    finally:
        if up.poll() is None:
            up.kill()
    assert up.returncode == 0, out[-2000:] + err[-4000:]
    job = json.loads(out)
    assert job["state"] == "SUCCEEDED" and job["step"] == 150
    db = StateDB(launchpad_home / "state.db")
    kinds = [e["kind"] for e in db.events(job["id"])]
    assert "preempted" in kinds and "auto-resume" in kinds, kinds
    resumes = [e["data"].get("checkpoint") for e in db.events(job["id"]) if e["kind"] == "resume"]
    assert resumes and resumes[-1] and "checkpoint-" in resumes[-1]  # from the last checkpoint, not step 0
    posted = [b["metadata"]["name"] for m, p, b in kube.requests if m == "POST" and p.endswith("/jobs")]
    assert len(posted) == 2 and posted[0] != posted[1]  # a new attempt, a new Job
    assert kube.jobs() == [] and no_pod_processes(kube)

