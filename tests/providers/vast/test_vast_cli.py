"""The real CLI on the vast provider, no training: `check` with a refused key, `plan --explain` ranking the
reliable host first on its own figures, and `down --all` finding launchpad's instances by label alone."""

from __future__ import annotations

import json

import pytest
from vast_helpers import H100, RELIABLE, SHAKY, offer_on

from launchpad.models import JOB_TAG, InstanceSpec

pytestmark = [pytest.mark.object_store, pytest.mark.sshd]


def test_check_lists_vast_and_a_refused_key_in_one_line(run_cli, vast_config):
    row = next(r for r in json.loads(run_cli("check", "--json", check=True).stdout)["providers"]
               if r["provider"] == "vast")
    assert row["usable"] is True and row["detail"].startswith("account lp-test@example.com"), row
    proc = run_cli("check", "--json", env={"VAST_API_KEY": "revoked-key"})
    row = next(r for r in json.loads(proc.stdout)["providers"] if r["provider"] == "vast")
    assert row["usable"] is False and "rejected the API key" in row["reason"] and "\n" not in row["reason"], row


def test_plan_explain_ranks_the_reliable_host_on_its_own_figures(run_cli, vast_config, tmp_path):
    import yaml

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "base_model": "builtin:tiny-llama", "adapter": "lora",
                                    "datasets": [{"path": "tatsu-lab/alpaca", "type": "alpaca"}], "max_steps": 10,
                                    "resources": {"gpu": "RTX4090"}}))
    ranked = json.loads(run_cli("plan", str(path), "--provider", "vast", "--json", check=True).stdout)["offers"]
    assert [r["zone"] for r in ranked] == [f"machine-{RELIABLE}", f"machine-{SHAKY}"]
    assert [r["reliability"] for r in ranked] == [0.995, 0.8]
    assert [r["scores"]["hardware_availability"] for r in ranked] == [0.995, 0.8]
    out = run_cli("plan", str(path), "--provider", "vast", "--explain", check=True).stdout
    row = next(line for line in out.splitlines() if "availability" in line.lower())
    assert "0.99" in row and "0.80" in row, out  # the winner's and the runner-up's own reliability


def test_down_all_finds_instances_by_label_with_no_state(run_cli, vast, vast_api, launchpad_home):
    for job, machine in (("job-p", RELIABLE), ("job-q", H100)):
        vast.provision(offer_on(vast, machine), InstanceSpec(job_id=job, token=f"{job}-1", tags={JOB_TAG: job}))
    assert len(vast_api.live()) == 2 and not (launchpad_home / "state.db").exists()  # nothing local knows them
    down = run_cli("down", "--all", "--json", timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    assert vast_api.live() == []
    assert run_cli("down", "--all", "--json", timeout=300).returncode == 0  # idempotent
