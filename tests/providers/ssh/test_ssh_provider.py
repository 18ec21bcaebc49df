"""The ssh provider against two real sshd hosts: claims, sync (wheel cache, venv reuse, dataset paths),
secrets and shell metacharacters reaching the agent as data, teardown modes, unreachable hosts."""

from __future__ import annotations

import json
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml
from ssh_servers import assert_private, host_entry, write_hosts

from launchpad.errors import NoCapacity
from launchpad.jobspec import JobSpec
from launchpad.models import JOB_TAG, Bundle, InstanceSpec, InstanceState, TeardownMode
from launchpad.recipe import load_recipe
from launchpad.testing_ssh import free_port

REPO = Path(__file__).resolve().parents[3]
WEIRD = "$(touch {m}1) `touch {m}2`; touch {m}3 && echo 'q' \"d\" | cat > {m}4 \\ * ~ $HOME !x\nline two"


def spec(job_id: str | None = None, n: int = 0) -> InstanceSpec:
    job_id = job_id or f"t-{uuid.uuid4().hex[:6]}"
    return InstanceSpec(job_id=job_id, token=f"{job_id}-{n}", tags={JOB_TAG: job_id})


def offer_for(provider, name: str):
    return next(o for o in provider.offers() if o.instance_type == name)


def bundle_for(tmp_path: Path, job_id: str, dataset: Path, env: dict | None = None, resume_from: Path | None = None
               ) -> Bundle:
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data.update(name="ssh-test", max_steps=2)
    data["datasets"][0]["path"] = str(dataset)
    if resume_from is not None:
        data["checkpoint"]["resume_from"] = str(resume_from)
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    recipe = load_recipe(path)
    job_spec = {"job_id": job_id, "recipe": recipe.model_dump(mode="json"),
                "checkpoint_uri": (tmp_path / "ckpt").as_uri(), "max_steps": 2}
    return Bundle(job_spec=JobSpec.from_json(job_spec), recipe_text=path.read_text(), env=env or {})


def test_two_jobs_never_claim_the_same_host(ssh_provider):
    a_offer, b_offer = offer_for(ssh_provider, "host-a"), offer_for(ssh_provider, "host-b")
    first = ssh_provider.provision(a_offer, spec("job-one"))
    try:
        with pytest.raises(NoCapacity) as err:
            ssh_provider.provision(a_offer, spec("job-two"))
        assert err.value.scope == "offer" and "host-a is in use by job job-one" in str(err.value)
        again = ssh_provider.provision(a_offer, spec("job-one", n=1))  # the same job (a retry, a resume): same claim
        assert again.id == first.id
        other = ssh_provider.provision(b_offer, spec("job-two"))
        assert {i.job_id: i.data["host"] for i in ssh_provider.instances()} == {"job-one": "host-a", "job-two": "host-b"}
        ssh_provider.teardown(other)
    finally:
        ssh_provider.teardown(first)
    assert ssh_provider.status(first) is InstanceState.TERMINATED

    # a race: eight jobs at once for one free host; exactly one gets it
    wins, losses = [], []

    def grab(i: int) -> None:
        from launchpad_ssh import SSHProvider

        p = SSHProvider({})
        try:
            wins.append(p.provision(a_offer, spec(f"race-{i}")))
        except NoCapacity:
            losses.append(i)

    threads = [threading.Thread(target=grab, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(wins) == 1 and len(losses) == 7
    ssh_provider.teardown(wins[0])
    assert ssh_provider.instances() == []


@pytest.mark.slow  # two syncs, each with the environment check (imports torch)
def test_sync_sends_the_wheel_once_reuses_the_venv_and_moves_datasets(ssh_provider, sshd_pair, tmp_path):
    odd = tmp_path / "data dir $(x) 'q'"
    odd.mkdir()
    dataset = odd / "chat set; rm -rf ~.jsonl"
    dataset.write_bytes((REPO / "recipes" / "data" / "smoke-chat.jsonl").read_bytes())
    start = odd / "checkpoint-1"  # checkpoint.resume_from: the folder travels with the job's inputs
    start.mkdir()
    (start / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    (start / "adapter_config.json").write_text(json.dumps({"r": 8, "lora_alpha": 16}))
    s = spec()
    inst = ssh_provider.provision(offer_for(ssh_provider, "host-a"), s)
    try:
        bundle = bundle_for(tmp_path, s.job_id, dataset, resume_from=start)
        ssh_provider.sync(inst, bundle)
        first = dict(ssh_provider.last_sync)
        assert first["files"] == 3 and first["venv"] in ("installed", "reused")
        ssh_provider.sync(inst, bundle)  # again: nothing is sent, nothing installed
        again = ssh_provider.last_sync
        assert {k: again[k] for k in ("files", "bytes", "wheel", "venv")} == {"files": 0, "bytes": 0, "wheel": "cached",
                                                                              "venv": "reused"}
        assert set(again["phases"]) == {"reachable", "sync", "environment"}

        workdir = Path(ssh_provider.workdir(inst))
        assert workdir == sshd_pair[0].root / "jobs" / inst.id
        job = json.loads((workdir / "job.json").read_text())
        remote_path = job["recipe"]["datasets"][0]["path"]
        assert remote_path.startswith(f"{workdir}/inputs/") and remote_path.endswith(dataset.name)
        assert Path(remote_path).read_bytes() == dataset.read_bytes()
        remote_start = Path(job["recipe"]["checkpoint"]["resume_from"])
        assert remote_start == workdir / "inputs" / "resume-from" / "checkpoint-1"
        assert {p.name for p in remote_start.iterdir()} == {"trainer_state.json", "adapter_config.json"}
        assert job["workdir"] == str(workdir) and job["status_path"] == f"{workdir}/status.json"
        assert job["autostop"]["command"] == ["rm", "-rf", "--", f"{sshd_pair[0].root}/claim"]
        assert job["mount_nvme"] is False
        assert (workdir / "recipe.yaml").read_text() == bundle.recipe_text
        wheels = list((sshd_pair[0].root / "wheels").glob("launchpad-*+g*.whl"))
        assert wheels and (sshd_pair[0].root / "venvs").is_dir()
        sent = assert_private(workdir)
        assert {p.name for p in sent} >= {"job.json", "recipe.yaml", dataset.name}
    finally:
        ssh_provider.teardown(inst)
    assert not workdir.exists() and not (sshd_pair[0].root / "claim").exists()


@pytest.mark.slow
def test_env_values_reach_the_agent_as_data_and_never_touch_disk(ssh_provider, tmp_path):
    marker = tmp_path / "pwned"
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    env = {"WEIRD": WEIRD.format(m=marker), "HF_TOKEN": secret}
    s = spec()
    inst = ssh_provider.provision(offer_for(ssh_provider, "host-b"), s)
    try:
        bundle = bundle_for(tmp_path, s.job_id, REPO / "recipes" / "data" / "smoke-chat.jsonl", env)
        ssh_provider.sync(inst, bundle)
        handle = ssh_provider.train(inst, bundle)
        assert ssh_provider.train(inst, bundle).pid == handle.pid  # already running: the same agent
        raw = Path(f"/proc/{handle.pid}/environ").read_bytes().split(b"\0")
        environ = dict(item.decode().split("=", 1) for item in raw if b"=" in item)
        assert environ["WEIRD"] == env["WEIRD"] and environ["HF_TOKEN"] == secret
        workdir = Path(ssh_provider.workdir(inst))
        for f in workdir.rglob("*"):
            if f.is_file():
                assert secret.encode() not in f.read_bytes(), f"the secret was written to {f}"
        assert not list(tmp_path.glob("pwned*"))
    finally:
        ssh_provider.teardown(inst)
    deadline = time.monotonic() + 15
    while Path(f"/proc/{handle.pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{handle.pid}").exists() or "Z" in Path(f"/proc/{handle.pid}/stat").read_text().split()[2]


def test_stop_runs_the_hosts_stop_command_and_keeps_the_claim(ssh_home, sshd_pair, client_key, tmp_path):
    from launchpad_ssh import SSHProvider

    marker = tmp_path / "stopped by launchpad"
    write_hosts(ssh_home, [host_entry(sshd_pair[1], client_key, stop_command=["touch", str(marker)])])
    p = SSHProvider({})
    inst = p.provision(p.offers()[0], spec())
    assert "touch" in inst.data["autostop"]
    p.teardown(inst, TeardownMode.STOP)
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists()
    assert p.status(inst) is InstanceState.RUNNING  # still claimed: a stopped machine keeps its disk
    p.teardown(inst, TeardownMode.TERMINATE)
    assert p.status(inst) is InstanceState.TERMINATED and p.instances() == []
    p.close()


def test_an_unreachable_host_is_skipped_as_no_capacity(launchpad_home, client_key):
    from launchpad_ssh import SSHProvider

    dead = {"name": "dead", "address": "127.0.0.1", "port": free_port(), "user": "root", "key": str(client_key),
            "connect_timeout": 1}
    write_hosts(launchpad_home, [dead])
    p = SSHProvider({})
    t0 = time.monotonic()
    with pytest.raises(NoCapacity, match="dead is unreachable.*within 1 s"):
        p.provision(p.offers()[0], spec())
    assert time.monotonic() - t0 < 6
    assert p.instances() == []  # skipped with a warning, not an error


def test_multi_node_claims_hosts_of_the_same_shape_or_none(ssh_provider, sshd_pair):
    a_offer, b_offer = offer_for(ssh_provider, "host-a"), offer_for(ssh_provider, "host-b")
    blocker = ssh_provider.provision(b_offer, spec("blocker"))
    two = InstanceSpec(job_id="two-nodes", token="two-nodes-0", nodes=2)
    with pytest.raises(NoCapacity, match="2 free hosts like host-a .* 1 are free"):
        ssh_provider.provision(a_offer, two)
    assert not (sshd_pair[0].root / "claim").exists(), "a partial multi-node claim is released"
    ssh_provider.teardown(blocker)

    inst = ssh_provider.provision(a_offer, two)
    try:
        assert [n["host"] for n in inst.data["nodes"]] == ["host-a", "host-b"]
        assert ssh_provider.provision(a_offer, two) == inst  # idempotent: the recorded job, both nodes
        assert [i.id for i in ssh_provider.instances()] == [inst.id]  # one job, found from either claim
        nodes = ssh_provider.nodes(inst)
        extras = [ssh_provider.job_spec_extras(n) for n in nodes]
        assert [e["node_rank"] for e in extras] == [0, 1]
        assert extras[0]["nodes"] == extras[1]["nodes"] == [{"rank": 0, "address": "127.0.0.1"},
                                                            {"rank": 1, "address": "127.0.0.1"}]
        assert extras[0]["master_port"] == extras[1]["master_port"]
    finally:
        ssh_provider.teardown(inst)
    assert not any((s.root / "claim").exists() for s in sshd_pair)
