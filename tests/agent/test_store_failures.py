"""A full disk and a lost store connection each end the job with one clear line, and nothing in the
store is left looking complete."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.object_store]  # starts moto_server itself


def recipe(tmp_path: Path, name: str, uri: str, **changes) -> Path:
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data.update(name=name, **changes)
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    data["checkpoint"] = {"uri": uri, "every_steps": 10, "keep": 2}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs: a real full disk (needs root and permission to mount; skipped otherwise)."""
    mnt = tmp_path / "tiny-disk"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("this machine does not allow mounting a tmpfs")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_fails_the_job_with_one_line(run_cli, tiny_disk, tmp_path):
    proc = run_cli("up", str(recipe(tmp_path, "fulldisk", tiny_disk.as_uri(), max_steps=30)), timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    error_line = proc.stderr.splitlines()[0]
    assert "checkpoint-10" in error_line and "No space left on device" in error_line
    assert not list(tiny_disk.rglob("MANIFEST.json")), "no checkpoint may look complete"


def test_a_lost_store_connection_fails_the_job_with_one_line(run_cli, tmp_path, monkeypatch):
    boto3 = pytest.importorskip("boto3")
    exe = shutil.which("moto_server") or str(Path(sys.executable).parent / "moto_server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([exe, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1", "LAUNCHPAD_STORAGE_RETRIES": "2"}
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        boto3.client("s3").create_bucket(Bucket="ckpt")
        path = recipe(tmp_path, "lostconn", "s3://ckpt/runs", max_steps=100000)
        up = subprocess.Popen([sys.executable, "-m", "launchpad", "up", str(path)], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"})
        s3 = boto3.client("s3")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # a first checkpoint reached the store: the store works
            listed = s3.list_objects_v2(Bucket="ckpt").get("Contents", [])
            if any(o["Key"].endswith("MANIFEST.json") for o in listed):
                break
            time.sleep(0.2)
        else:
            up.kill()
            raise AssertionError("no checkpoint reached the store")
    finally:
        server.terminate()  # the store goes away mid-run
        server.wait()
    out, err = up.communicate(timeout=300)
    assert up.returncode == 1, out + err
    first = err.splitlines()[0]
    assert "uploading checkpoint-" in first and "s3://ckpt/runs" in first, first
