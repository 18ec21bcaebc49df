"""The multi-node preflight on real sshd "hosts" (127.0.0.1): the clock of every node read over SSH and
the all-reduce probe run on both through the venv sync made, at the provider level and through the
real CLI -- a promise far above what loopback gloo reaches warns (shown by `status`) or, with
`--strict`, fails the job before training with the hosts released; a host whose clock really is off
(libfaketime preloaded into its sshd's sessions with `SetEnv`) fails the job, naming it and the fix."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from launchpad_ssh import SSHProvider
from ssh_servers import Sshd, host_entry, write_hosts
from test_ssh_e2e import assert_released, cli_env, make_recipe

from launchpad.errors import ConfigError
from launchpad.jobspec import JobSpec
from launchpad.models import JOB_TAG, Bundle, InstanceSpec
from launchpad.recipe import load_recipe
from launchpad.testing_ssh import skewed_clock_env

REPO = Path(__file__).resolve().parents[3]
SKEW_S = 5.0

pytestmark = [pytest.mark.sshd]


def _bundle(tmp_path: Path, job_id: str) -> Bundle:
    path, ckpt = make_recipe(tmp_path, "preflight", steps=2, every=2, resources={"nodes": 2})
    recipe = load_recipe(path)
    spec = JobSpec.from_json({"job_id": job_id, "recipe": recipe.model_dump(mode="json"), "checkpoint_uri": ckpt,
                              "max_steps": 2})
    return Bundle(job_spec=spec, recipe_text=path.read_text(), env={"NCCL_DEBUG": "WARN"})


def _up(home: Path, recipe: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launchpad", "up", str(recipe), "--provider", "ssh", *args],
                          capture_output=True, text=True, env=cli_env(home), cwd=REPO, timeout=400)


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launchpad", *args], capture_output=True, text=True,
                          env=cli_env(home), cwd=REPO, timeout=300)


def _job_id(proc: subprocess.CompletedProcess) -> str:
    """The job id `up` printed (`job <id>` first, in human mode)."""
    for line in proc.stdout.splitlines():
        if line.startswith("job "):
            return line.split()[1]
    raise AssertionError(f"no job id in:\n{proc.stdout}\n{proc.stderr}")


def _no_probe_left() -> None:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "launchpad.agent.probe" not in out, "a probe is still running"


@pytest.mark.slow
def test_two_node_preflight_over_ssh_measures_skew_and_bus_bandwidth(ssh_provider, sshd_pair, tmp_path):
    provider = ssh_provider
    offer = next(o for o in provider.offers() if o.instance_type == "host-a")
    single = provider.provision(offer, InstanceSpec(job_id="pf-one", token="pf-one-0", tags={JOB_TAG: "pf-one"}))
    try:
        assert provider.preflight(single, _bundle(tmp_path, "pf-one"), strict=True) is None  # one node: nothing runs
    finally:
        provider.teardown(single)

    inst = provider.provision(offer, InstanceSpec(job_id="pf-two", token="pf-two-0", tags={JOB_TAG: "pf-two"}, nodes=2))
    try:
        bundle = _bundle(tmp_path, "pf-two")
        provider.sync(inst, bundle)
        report = provider.preflight(inst, bundle, strict=True)  # nothing promised: strict has nothing to judge
        assert report is not None
        print(report.summary())
        assert [n.split()[:3] for n in report.nodes] == [["rank", "0", "host-a"], ["rank", "1", "host-b"]]
        assert report.skew_s < 0.5 and all(c.error_s < 0.5 for c in report.clocks)  # one machine, one clock
        bw = report.bandwidth
        assert bw is not None and bw.backend == "gloo" and bw.world_size == 2 and bw.busbw_gbps > 0
        assert report.promise is None and report.warnings == () and "no promised bandwidth" in report.summary()
        _no_probe_left()
    finally:
        provider.teardown(inst)
    assert not any((s.root / "claim").exists() for s in sshd_pair)


@pytest.mark.slow
def test_a_promise_far_above_the_measurement_warns_and_strict_fails_before_training(launchpad_home, sshd_pair,
                                                                                   client_key, tmp_path):
    write_hosts(launchpad_home, [host_entry(s, client_key, fabric_gbps=100000) for s in sshd_pair])
    recipe, _ = make_recipe(tmp_path, "pf-promise", steps=2, every=2, resources={"nodes": 2})

    proc = _up(launchpad_home, recipe, "--strict")  # 100 Tb/s promised, loopback gloo is far below 60 % of it
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "100000 Gb/s" in errors[0] and "fabric_gbps of host-a" in errors[0], proc.stderr
    assert "without --strict this is a warning" in errors[0]
    job = _job_id(proc)
    assert_released(sshd_pair)  # the job failed before training and left nothing behind
    _no_probe_left()
    row = json.loads(_cli(launchpad_home, "status", job, "--json").stdout)[0]
    assert row["state"] == "FAILED" and "100000 Gb/s" in row["error"]
    assert row["preflight"]["expected_gbps"] == 100000 and row["preflight"]["busbw_gbps"] > 0
    assert "Gb/s" in row["preflight"]["failed"]
    events = _cli(launchpad_home, "status", job).stdout
    assert "TRAINING" not in events and "preflight" in events
    again = _cli(launchpad_home, "resume", job, "--strict")  # resume takes --strict too: same verdict
    assert again.returncode == 1 and "100000 Gb/s" in again.stderr, again.stdout + again.stderr
    assert_released(sshd_pair)

    proc = _up(launchpad_home, recipe, "--detach")  # without --strict: a warning, and the job trains
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = _job_id(proc)
    try:
        assert "of the 100000 Gb/s the interconnect promises" in proc.stdout, proc.stdout
        row = json.loads(_cli(launchpad_home, "status", job, "--json").stdout)[0]
        assert row["state"] == "TRAINING" and len(row["warnings"]) == 1 and "100000 Gb/s" in row["warnings"][0]
        assert row["preflight"]["share"] < 0.6
        shown = _cli(launchpad_home, "status", job)
        assert "warning" in shown.stdout and "100000 Gb/s" in shown.stdout, shown.stdout
        listed = _cli(launchpad_home, "status")
        assert f"! {job}: the all-reduce probe measured" in listed.stdout, listed.stdout
    finally:
        down = _cli(launchpad_home, "down", job)
        assert down.returncode == 0, down.stderr
    assert_released(sshd_pair)


@pytest.fixture(scope="module")
def sshd_skewed(tmp_path_factory, client_key):
    """A third host whose clock is SKEW_S seconds ahead: every process of its SSH sessions (sh, date,
    the venv's python) runs with libfaketime preloaded (sshd_config SetEnv)."""
    if not shutil.which("faketime") and os.geteuid() == 0 and shutil.which("apt-get"):  # as ensure_openssh does
        subprocess.run(["apt-get", "install", "-y", "-q", "faketime"], check=False, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=300)
    try:
        env = skewed_clock_env(SKEW_S)
    except RuntimeError as missing:
        pytest.fail(str(missing))
    base = tmp_path_factory.mktemp("sshd-skewed")
    authorized = base / "authorized_keys"
    authorized.write_text(Path(f"{client_key}.pub").read_text())
    server = Sshd("host-skew", base / "host-skew", authorized)
    server.env = env
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.mark.slow
def test_a_node_whose_clock_is_off_fails_the_job_naming_it_and_the_fix(launchpad_home, sshd_pair, sshd_skewed,
                                                                      client_key, tmp_path):
    write_hosts(launchpad_home, [host_entry(sshd_pair[0], client_key), host_entry(sshd_skewed, client_key)])
    recipe, _ = make_recipe(tmp_path, "pf-skew", steps=2, every=2, resources={"nodes": 2})
    proc = _up(launchpad_home, recipe)  # no --strict needed: a skewed clock always fails
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    error = errors[0]
    assert "rank 1 host-skew" in error and "ahead of rank 0 host-a" in error, error
    skew = float(error.split("differ by ")[1].split(" s")[0])
    assert abs(skew - SKEW_S) < 0.5, error
    assert "sudo timedatectl set-ntp true" in error and "chrony" in error
    assert_released([sshd_pair[0], sshd_skewed])
    row = json.loads(_cli(launchpad_home, "status", _job_id(proc), "--json").stdout)[0]
    assert row["state"] == "FAILED" and abs(row["preflight"]["skew_s"] - SKEW_S) < 0.5
    assert "busbw_gbps" not in row["preflight"]  # the probe never ran


def test_hosts_yaml_states_a_fabric_promise_and_the_slowest_host_counts(launchpad_home, sshd_pair, client_key):
    write_hosts(launchpad_home, [host_entry(sshd_pair[0], client_key, fabric_gbps=200),
                                 host_entry(sshd_pair[1], client_key, fabric_gbps=100)])
    provider = SSHProvider({})
    offer = next(o for o in provider.offers() if o.instance_type == "host-a")
    inst = provider.provision(offer, InstanceSpec(job_id="pf-promise", token="pf-promise-0", nodes=2,
                                                  tags={JOB_TAG: "pf-promise"}))
    try:
        promise = provider.fabric_promise(inst)
        assert promise is not None and promise.gbps == 100 and promise.source == "hosts.yaml: fabric_gbps of host-b"
    finally:
        provider.teardown(inst)
        provider.close()
    write_hosts(launchpad_home, [host_entry(sshd_pair[0], client_key, fabric_gbps=-1)])
    with pytest.raises(ConfigError, match=r"hosts\[0\] \(host-a\)\.fabric_gbps"):
        SSHProvider({}).hosts()
