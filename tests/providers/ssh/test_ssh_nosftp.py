"""A host whose sshd has no SFTP subsystem: the whole job -- sync with upload progress, train,
progress, logs, a checkpoint on request while training -- runs over exec channels, and the job's tree
on the host stays private (0700/0600) throughout."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from ssh_servers import assert_private, host_entry, write_hosts

from launchpad.jobspec import JobSpec
from launchpad.models import JOB_TAG, Bundle, InstanceSpec
from launchpad.recipe import load_recipe

REPO = Path(__file__).resolve().parents[3]

pytestmark = [pytest.mark.slow, pytest.mark.sshd]


def bundle(tmp_path: Path, job_id: str, dataset: Path, steps: int) -> Bundle:
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data.update(name="nosftp", max_steps=steps)
    data["datasets"][0]["path"] = str(dataset)
    data["checkpoint"] = {**data["checkpoint"], "every_steps": 1000}  # only the requested and the final one
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    spec = {"job_id": job_id, "recipe": load_recipe(path).model_dump(mode="json"),
            "checkpoint_uri": (tmp_path / "ckpt").as_uri(), "max_steps": steps}
    return Bundle(job_spec=JobSpec.from_json(spec), recipe_text=path.read_text(), env={})


def test_a_host_without_sftp_runs_the_whole_job_over_exec(launchpad_home, sshd_nosftp, client_key, tmp_path):
    from launchpad_ssh import SSHProvider

    write_hosts(launchpad_home, [host_entry(sshd_nosftp, client_key)])
    dataset = tmp_path / "private data $(x).jsonl"
    dataset.write_bytes((REPO / "recipes" / "data" / "smoke-chat.jsonl").read_bytes())
    dataset.chmod(0o600)
    p = SSHProvider({})
    seen: list[tuple[str, int, int]] = []
    p.transfer_progress = lambda what, done, total: seen.append((what, done, total))
    job_id = "nosftp-job"
    inst = p.provision(p.offers()[0], InstanceSpec(job_id=job_id, token=f"{job_id}-0", tags={JOB_TAG: job_id}))
    workdir = Path(p.workdir(inst))
    try:
        b = bundle(tmp_path, job_id, dataset, steps=80)
        p.sync(inst, b)
        size = dataset.stat().st_size
        assert p.last_sync["files"] == 1 and (dataset.name, size, size) in seen
        assert any(what.startswith("launchpad-") and done == total for what, done, total in seen)
        p.sync(inst, b)  # stat and mtime over exec: nothing is sent again
        again = p.last_sync
        assert {k: again[k] for k in ("files", "bytes", "wheel", "venv")} == {"files": 0, "bytes": 0, "wheel": "cached",
                                                                              "venv": "reused"}
        assert_private(workdir)

        p.train(inst, b)
        deadline = time.monotonic() + 240
        while (pr := p.progress(inst)).step < 3 and pr.exit_code is None and time.monotonic() < deadline:
            time.sleep(0.3)
        before = pr.step
        ref = p.checkpoint(inst, timeout=240)  # request_save over exec, then waits for its manifest
        assert ref is not None and ref.step >= before
        while p.progress(inst).running and time.monotonic() < deadline:
            time.sleep(0.5)
        final = p.progress(inst)
        assert final.exit_code == 0 and final.step == 80, list(p.logs(inst))[-20:]
        assert p.checkpoint(inst).step == 80
        assert any("step" in line or "loss" in line for line in p.logs(inst))
        names = {f.name for f in assert_private(workdir)}
        assert {"job.json", "job.trainer.json", "recipe.yaml", "train.log", "agent.log", "status.json",
                dataset.name} <= names, names
    finally:
        p.teardown(inst)
        p.close()
    assert not workdir.exists() and not (sshd_nosftp.root / "claim").exists()
