"""Cold start over a real sshd: phase times recorded and shown, a host's own PyTorch stack reused and
checked, and the wheel cache (a bare host fills it through the agent; the next instance installs from
the store with the index unreachable)."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
import uuid
import zipfile
from pathlib import Path

import pytest
import yaml
from ssh_servers import host_entry, write_hosts

from launchpad.errors import ProviderError
from launchpad.jobspec import JobSpec
from launchpad.models import JOB_TAG, Bundle, InstanceSpec
from launchpad.recipe import load_recipe
from launchpad.testing_ssh import free_port
from launchpad.train.envcheck import EnvironmentMismatch
from launchpad.wheelcache import CACHE_PREFIX, INDEX, PENDING_FILE

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.sshd


def spec(job_id: str) -> InstanceSpec:
    return InstanceSpec(job_id=job_id, token=f"{job_id}-0", tags={JOB_TAG: job_id})


def bundle_for(tmp_path: Path, job_id: str, ckpt: Path, **changes) -> Bundle:
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data.update(name="coldstart", max_steps=2, **changes)
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    path = tmp_path / f"{job_id}.yaml"
    path.write_text(yaml.safe_dump(data))
    recipe = load_recipe(path)
    job_spec = {"job_id": job_id, "recipe": recipe.model_dump(mode="json"), "checkpoint_uri": ckpt.as_uri(), "max_steps": 2}
    return Bundle(job_spec=JobSpec.from_json(job_spec), recipe_text=path.read_text(), env={})


def cli(home: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAUNCHPAD_HOME": str(home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "launchpad", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout)


class RecordingIndex:
    """A package index on 127.0.0.1 that has nothing: every request is answered 404 and counted."""

    def __init__(self) -> None:
        hits: list[str] = []
        self.hits = hits

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                hits.append(self.path)
                self.send_error(404)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def uv_binary(tmp_path_factory) -> Path:
    """A uv binary for the bare host (uv from PATH or this venv, else its wheel from the index, once)."""
    import shutil

    for found in (shutil.which("uv"), str(Path(sys.executable).parent / "uv")):
        if found and Path(found).is_file():
            return Path(found)
    cache = Path.home() / ".cache" / "launchpad-tests" / "uv"
    binary = cache / "uv"
    if not binary.exists():
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:",
                               "-d", str(cache), "uv>=0.8"], capture_output=True, text=True, timeout=300)
        wheel = next(iter(cache.glob("uv-*.whl")), None)
        if proc.returncode != 0 or wheel is None:
            pytest.skip(f"no uv here and none from the index: {proc.stderr.strip()[-200:]}")
        with zipfile.ZipFile(wheel) as z:
            binary.write_bytes(z.read(next(n for n in z.namelist() if n.endswith(".data/scripts/uv"))))
        binary.chmod(0o755)
    return binary


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory, uv_binary) -> Path:
    """A host interpreter without the training stack (a plain venv), with uv next to it as a host may have."""
    venv = tmp_path_factory.mktemp("bare-host") / "python"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    (venv / "bin" / "uv").symlink_to(uv_binary)
    return venv / "bin" / "python"


@pytest.fixture
def moto_s3(tmp_path, monkeypatch):
    """moto's S3 server on 127.0.0.1 with a bucket; its env (endpoint, test credentials) set here too."""
    import shutil

    exe = shutil.which("moto_server") or shutil.which("moto_server", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("moto's server is not installed (pip install 'moto[server]')")
    port = free_port()
    proc = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "AKIDTESTING",
           "AWS_SECRET_ACCESS_KEY": "s3cr3t-stays-off-the-host", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true",
           "AWS_CONFIG_FILE": str(tmp_path / "aws-config"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-creds")}
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                import socket

                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.1)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        import boto3

        boto3.session.Session().client("s3").create_bucket(Bucket="lp-wheels")
        yield env
    finally:
        proc.terminate()
        proc.wait(10)


def provider_for(home: Path, sshd_pair, client_key, python: Path | str, root: Path, **config):
    from launchpad_ssh import SSHProvider

    write_hosts(home, [host_entry(sshd_pair[0], client_key, python=str(python), root=str(root))])
    return SSHProvider(config)


@pytest.mark.slow
def test_status_json_and_the_job_view_show_each_phase_of_a_real_job(ssh_home, sshd_pair, tmp_path):
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    data["checkpoint"] = {"every_steps": 5, "keep": 1, "uri": (tmp_path / "ckpt").as_uri()}
    recipe = tmp_path / "phases.yaml"
    recipe.write_text(yaml.safe_dump({**data, "name": "phases", "max_steps": 5}))
    up = cli(ssh_home, "up", str(recipe), "--provider", "ssh", "--json")
    assert up.returncode == 0, up.stderr
    job_id = json.loads(up.stdout)["id"]
    status = cli(ssh_home, "status", job_id, "--json")
    assert status.returncode == 0, status.stderr
    row = json.loads(status.stdout)
    row = row[0] if isinstance(row, list) else row
    phases = row["phase_times"]
    order = ["provision", "reachable", "sync", "environment", "launch", "prewarm", "loading", "first_step"]
    assert [p for p in order if p in phases] == order, phases
    for name in order:
        assert phases[name]["seconds"] >= 0 and phases[name]["end"] >= phases[name]["start"], (name, phases[name])
    for before, after in zip(order, order[1:], strict=False):  # one after another, on this one machine's clock
        assert phases[after]["start"] >= phases[before]["start"] - 0.01, (before, after)
    total = phases["total"]
    assert total["end"] == phases["first_step"]["end"] and total["seconds"] >= sum(phases[p]["seconds"] for p in order) - 1
    detail = phases["environment_detail"]
    assert detail["venv"] in ("installed", "reused") and detail["env_seconds"]["check"] > 0
    view = cli(ssh_home, "status", job_id).stdout
    assert "start-up phases" in view and "time to first step" in view and "environment" in view


@pytest.mark.slow
def test_a_host_python_with_the_stack_is_reused_checked_and_fast(launchpad_home, sshd_pair, client_key, tmp_path):
    provider = provider_for(launchpad_home, sshd_pair, client_key, sys.executable, tmp_path / "root")
    job = f"reuse-{uuid.uuid4().hex[:6]}"
    inst = provider.provision(provider.offers()[0], spec(job))
    try:
        bundle = bundle_for(tmp_path, job, tmp_path / "ckpt")
        provider.sync(inst, bundle)  # a fresh root: a new venv over the host's own torch stack
        first = provider.last_sync
        assert (first["venv"], first["source"]) == ("installed", "host"), first
        env = json.loads((Path(provider.workdir(inst)) / "env.json").read_text())  # the environment check ran
        assert env["versions"]["torch"] and env["problems"] == []
        start, end = first["phases"]["environment"]
        assert end - start <= 15, f"environment set-up took {end - start:.1f}s on a host that has the stack"
        assert not (tmp_path / "root" / "wheelhouse").exists() or not any((tmp_path / "root" / "wheelhouse").iterdir())
        provider.sync(inst, bundle)
        assert (provider.last_sync["venv"], provider.last_sync["env_seconds"].get("check", 0) > 0) == ("reused", True)
    finally:
        provider.teardown(inst)
        provider.close()


@pytest.mark.slow
def test_a_recipe_this_stack_cannot_run_fails_at_sync_in_one_line(launchpad_home, sshd_pair, client_key, tmp_path):
    provider = provider_for(launchpad_home, sshd_pair, client_key, sys.executable, tmp_path / "root")
    job = f"mismatch-{uuid.uuid4().hex[:6]}"
    inst = provider.provision(provider.offers()[0], spec(job))
    try:
        with pytest.raises(EnvironmentMismatch) as err:
            provider.sync(inst, bundle_for(tmp_path, job, tmp_path / "ckpt", flash_attention=True))
        # no flash-attn here, and no GPU for torch's own FlashAttention (torch >= 2.10) either
        assert str(err.value).startswith(f"{inst.id}: ") and any(why in str(err.value) for why in (
            "flash-attn is not installed", "flash_attention: true needs a CUDA GPU"))
        assert "\n" not in str(err.value)
    finally:
        provider.teardown(inst)
        provider.close()


@pytest.mark.slow
def test_a_bare_host_fills_the_wheel_cache_and_the_next_instance_installs_from_it_without_the_index(
        launchpad_home, sshd_pair, client_key, bare_python, tmp_path):
    ckpt = tmp_path / "ckpt"
    small = {"extras": [], "env_check": False}  # the core's few dependencies stand in for the training stack
    # 1. a fresh root on a host whose python has nothing: uv resolves and downloads from the host's index
    first = provider_for(launchpad_home, sshd_pair, client_key, bare_python, tmp_path / "root-a", **small)
    job = f"bare-{uuid.uuid4().hex[:6]}"
    inst = first.provision(first.offers()[0], spec(job))
    try:
        bundle = bundle_for(tmp_path, job, ckpt)
        first.sync(inst, bundle)
        stats = first.last_sync
        assert (stats["venv"], stats["source"], stats.get("wheel_cache")) == ("installed", "index", "to upload"), stats
        assert stats["installer"].startswith("uv ")
        pending = json.loads((Path(first.workdir(inst)) / PENDING_FILE).read_text())
        wheelhouse = Path(pending["dir"])
        assert pending["complete"] and {f["name"].split("-")[0].lower() for f in pending["files"]} >= {"click", "pydantic"}
        # the agent uploads the wheelhouse while the job runs (here its trainer fails at once: no torch)
        first.train(inst, bundle)
        deadline = time.monotonic() + 120
        while first.progress(inst).running and time.monotonic() < deadline:
            time.sleep(0.2)
        cache = ckpt / CACHE_PREFIX / stats["cache_key"]
        index = json.loads((cache / INDEX).read_text())
        assert index["complete"] and sorted(f["name"] for f in index["files"]) == sorted(f["name"] for f in pending["files"])
        assert all(len(f["sha256"]) == 64 and (cache / f["name"]).stat().st_size == f["size"] for f in index["files"])
        assert not wheelhouse.exists(), "the host's copy is deleted once the store has it"
        status = json.loads((Path(first.workdir(inst)) / "status.json").read_text())
        assert status["wheel_cache"]["state"] == "done" and "prewarm_done" in status["phase_times"]
    finally:
        first.teardown(inst)
        first.close()

    # 2. the next instance (a fresh root): from the store, while the only index it knows answers nothing
    index_server = RecordingIndex()
    try:
        second = provider_for(launchpad_home, sshd_pair, client_key, bare_python, tmp_path / "root-b",
                              index_url=index_server.url, **small)
        job2 = f"bare-{uuid.uuid4().hex[:6]}"
        inst2 = second.provision(second.offers()[0], spec(job2))
        try:
            second.sync(inst2, bundle_for(tmp_path, job2, ckpt))
            assert (second.last_sync["source"], second.last_sync["venv"]) == ("cache", "installed"), second.last_sync
            assert index_server.hits == [], "installing from the wheel cache contacted the index"
            venv_python = second.venv_python(inst2)
            check = subprocess.run([venv_python, "-c", "import click, pydantic, launchpad"], capture_output=True, text=True)
            assert check.returncode == 0, check.stderr
        finally:
            second.teardown(inst2)
            second.close()

        # control: without the cache the same host and index cannot install at all (the index is really unusable)
        third = provider_for(launchpad_home, sshd_pair, client_key, bare_python, tmp_path / "root-c",
                             index_url=index_server.url, wheel_cache=False, **small)
        job3 = f"bare-{uuid.uuid4().hex[:6]}"
        inst3 = third.provision(third.offers()[0], spec(job3))
        try:
            with pytest.raises(ProviderError, match="preparing the Python environment failed"):
                third.sync(inst3, bundle_for(tmp_path, job3, ckpt))
            assert index_server.hits, "the control install never asked the index"
        finally:
            third.teardown(inst3)
            third.close()
    finally:
        index_server.close()


@pytest.mark.slow
@pytest.mark.object_store
def test_an_s3_wheel_cache_reaches_a_bare_host_through_presigned_urls(
        launchpad_home, sshd_pair, client_key, bare_python, moto_s3, tmp_path):
    import boto3

    uri = "s3://lp-wheels/jobs"
    small = {"extras": ["s3"], "env_check": False}  # boto3 in the host's venv: the agent's uploads need it

    def s3_bundle(job_id: str) -> Bundle:
        b = bundle_for(tmp_path, job_id, tmp_path / "unused")
        return Bundle(job_spec=b.job_spec.replace(checkpoint_uri=uri), recipe_text=b.recipe_text, env=dict(moto_s3))

    first = provider_for(launchpad_home, sshd_pair, client_key, bare_python, tmp_path / "root-a", **small)
    job = f"s3-{uuid.uuid4().hex[:6]}"
    inst = first.provision(first.offers()[0], spec(job))
    try:
        bundle = s3_bundle(job)
        first.sync(inst, bundle)
        stats = first.last_sync
        assert (stats["source"], stats.get("wheel_cache")) == ("index", "to upload"), stats
        first.train(inst, bundle)  # the agent (with the recipe's env: the store's credentials) uploads
        deadline = time.monotonic() + 120
        while first.progress(inst).running and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        first.teardown(inst)
        first.close()
    s3 = boto3.session.Session().client("s3")
    key = f"jobs/{CACHE_PREFIX}/{stats['cache_key']}/{INDEX}"
    index = json.loads(s3.get_object(Bucket="lp-wheels", Key=key)["Body"].read())
    assert index["complete"] and any(f["name"].startswith("boto3-") for f in index["files"])

    index_server = RecordingIndex()
    try:
        second = provider_for(launchpad_home, sshd_pair, client_key, bare_python, tmp_path / "root-b",
                              index_url=index_server.url, **small)
        job2 = f"s3-{uuid.uuid4().hex[:6]}"
        inst2 = second.provision(second.offers()[0], spec(job2))
        try:
            second.sync(inst2, s3_bundle(job2))
            assert second.last_sync["source"] == "cache" and index_server.hits == [], second.last_sync
            config = json.loads((Path(second.workdir(inst2)) / "venv-setup.json").read_text())
            urls = config["cache"]["urls"].values()  # signed URLs, never the store's credentials, reach the host
            assert urls and all("Signature=" in url for url in urls) and "s3cr3t" not in json.dumps(config)
        finally:
            second.teardown(inst2)
            second.close()
    finally:
        index_server.close()
