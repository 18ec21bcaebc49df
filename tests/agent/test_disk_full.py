"""The instance's disk fills up (a real, small tmpfs as the `local` provider's instance root): the job
ends with the real cause ("disk full: No space left on device writing ... on the instance's <mount>"),
never "killed by signal 9"; the agent never dies with an empty log; the instance is torn down and
nothing of the job keeps running."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from launchpad.storage import open_store
from launchpad.storage.checkpoints import latest_checkpoint

from .test_agent_e2e import REPO, configure_local, wait_for, write_recipe

pytestmark = pytest.mark.slow


def mount_tmpfs(path: Path, size: str) -> Path:
    path.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                      capture_output=True, check=False).returncode:
        pytest.skip("this machine does not allow mounting a tmpfs")
    return path


@pytest.fixture
def instance_disk(tmp_path, launchpad_home):
    """A 4 MiB tmpfs holding the local instances: room for the job files, the agent's reserve and one
    smoke checkpoint (~2.6 MB), not two. The store stays on the big disk (LAUNCHPAD_HOME)."""
    mnt = mount_tmpfs(tmp_path / "instance-disk", "4m")
    configure_local(launchpad_home, root=str(mnt), idle_seconds=1)
    yield mnt
    unmount(mnt)


def unmount(mnt: Path) -> None:
    left = subprocess.run(["pgrep", "-f", str(mnt)], capture_output=True, text=True, check=False).stdout.split()
    for pid in left:  # only if a test failed: never leave its processes behind
        try:
            os.kill(int(pid), 9)
        except (ProcessLookupError, ValueError):
            pass
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(path: Path) -> None:
    """Write zeros to `path` until its disk is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        assert e.errno == 28, e
    finally:
        os.close(fd)


def nothing_runs_on(mnt: Path) -> bool:
    return subprocess.run(["pgrep", "-f", str(mnt)], capture_output=True, check=False).returncode == 1


def the_workdir(mnt: Path) -> Path:
    return wait_for(lambda: next(iter(mnt.glob("local-*/")), None), timeout=60, what="the instance")


def final_status(workdir: Path, timeout: float = 180) -> dict:
    def finished():
        try:
            doc = json.loads((workdir / "status.json").read_text())
        except (OSError, ValueError):
            return None
        return doc if doc.get("finished") else None

    return wait_for(finished, timeout=timeout, what="the agent's final status")


def test_checkpoints_that_fill_the_disk_fail_the_job_with_the_real_cause(run_cli, launchpad_home, instance_disk,
                                                                          tmp_path):
    recipe = write_recipe(tmp_path, "diskfull", max_steps=30, checkpoint={"every_steps": 5, "keep": 2})
    up = run_cli("up", str(recipe), timeout=300)
    assert up.returncode == 1, up.stdout + up.stderr
    first = up.stderr.splitlines()[0]
    assert "disk full: No space left on device writing" in first and f"on the instance's {instance_disk}" in first, first
    assert "signal" not in first, first
    assert "checkpoint-10" in first, "names the checkpoint that did not fit"

    (job,) = json.loads(run_cli("status", "--json", check=True).stdout)
    assert job["state"] == "FAILED", job
    assert job["error"].startswith("disk full: No space left on device") and "signal" not in job["error"]
    assert "\n" not in job["error"]
    # torn down as any failed job: nothing left on the disk, nothing running from it
    assert not list(instance_disk.iterdir())
    assert nothing_runs_on(instance_disk)
    # nothing lost: the checkpoint that fitted is complete in the store
    ref = latest_checkpoint(open_store((launchpad_home / "checkpoints").as_uri()), job["id"])
    assert ref is not None and ref.step == 5


def test_with_the_client_gone_the_agent_reports_the_full_disk_and_status_shows_it(run_cli, launchpad_home,
                                                                                   instance_disk, tmp_path):
    recipe = write_recipe(tmp_path, "diskgone", max_steps=30, checkpoint={"every_steps": 5, "keep": 2})
    job = json.loads(run_cli("up", str(recipe), "--detach", "--json", check=True).stdout)
    workdir = the_workdir(instance_disk)
    status = final_status(workdir)

    assert status["phase"] == "failed", status
    assert status["error"].startswith(f"disk full: No space left on device writing {workdir}"), status["error"]
    assert f"on the instance's {instance_disk}" in status["error"]
    assert "freed" in status["error"], "the agent made room by deleting its local checkpoint scratch"
    assert not list((workdir / "output").glob("checkpoint-*")), "local checkpoint scratch is gone"
    log = (workdir / "train.log").read_text()
    assert "[agent]" in log and "job failed: disk full" in log, log[-2000:]
    assert "Traceback" not in log, "the trainer says it in one line, not a traceback per failed write"
    assert "error: disk full: No space left on device writing" in log, "the trainer's own line"
    assert int((workdir / "trainer.exit").read_text()) > 0
    # the agent ends by itself (idle), and `status` reconciles the job with the cause the agent reported
    wait_for(lambda: nothing_runs_on(instance_disk), timeout=60, what="the agent and trainer to end")
    (row,) = json.loads(run_cli("status", "--json", check=True).stdout)
    assert row["id"] == job["id"] and row["state"] == "FAILED", row
    assert row["error"].startswith("disk full:") and "signal" not in row["error"], row["error"]
    assert not list(instance_disk.iterdir()), "the failed job's instance was torn down"


def test_the_agent_survives_its_own_writes_failing_for_space(run_cli, launchpad_home, tmp_path):
    """Something else fills the disk while training runs without saving: the agent's own writes
    (status.json, train.log) fail first. It stops the trainer, gives back its reserve to write the final
    status, and the job fails with the cause."""
    mnt = mount_tmpfs(tmp_path / "shared-disk", "8m")
    try:
        configure_local(launchpad_home, root=str(mnt / "instances"), idle_seconds=1)
        recipe = write_recipe(tmp_path, "filled", max_steps=100000, checkpoint={"every_steps": 100000, "keep": 1})
        run_cli("up", str(recipe), "--detach", "--json", check=True)
        workdir = the_workdir(mnt / "instances")

        def training():
            try:
                return json.loads((workdir / "status.json").read_text()).get("step", 0) >= 3
            except (OSError, ValueError):
                return False

        wait_for(training, what="training to start")
        fill(mnt / "filler")  # another process takes all the space that is left
        status = final_status(workdir, timeout=120)
        assert status["phase"] == "failed", status
        assert status["error"].startswith("disk full: No space left on device writing"), status["error"]
        assert f"on the instance's {mnt}" in status["error"]
        wait_for(lambda: nothing_runs_on(mnt), timeout=60, what="the agent and trainer to end")
        assert "job failed: disk full" in (workdir / "train.log").read_text()
        (row,) = json.loads(run_cli("status", "--json", check=True).stdout)
        assert row["state"] == "FAILED" and row["error"].startswith("disk full:"), row
        assert nothing_runs_on(mnt)
    finally:
        unmount(mnt)


def test_the_trainer_status_writer_survives_a_full_disk(tmp_path):
    from launchpad.train.status import StatusWriter

    mnt = mount_tmpfs(tmp_path / "full", "64k")
    try:
        status = StatusWriter(mnt / "trainer-status.json", "job-1")
        status.update(phase="training", step=1)
        fill(mnt / "filler")
        status.add_loss(2, 1.5)  # no traceback: the document waits in memory
        status.update(phase="failed", error="x")
        assert status.write_error is not None and status.write_error.errno == 28
        assert json.loads((mnt / "trainer-status.json").read_text())["step"] == 1
        (mnt / "filler").unlink()
        status.update()
        assert status.write_error is None
        assert json.loads((mnt / "trainer-status.json").read_text())["error"] == "x"
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_an_agent_gone_on_a_full_disk_is_reported_as_disk_full_not_signal_9(run_cli, launchpad_home, tmp_path):
    """Even when the agent is gone before it could say anything (here: killed), a full disk under its
    work directory is the cause `status` reports, and the job is torn down."""
    mnt = mount_tmpfs(tmp_path / "gone-disk", "8m")
    try:
        configure_local(launchpad_home, root=str(mnt / "instances"))
        recipe = write_recipe(tmp_path, "agentgone", max_steps=100000, checkpoint={"every_steps": 100000, "keep": 1})
        run_cli("up", str(recipe), "--detach", "--json", check=True)
        workdir = the_workdir(mnt / "instances")
        wait_for(lambda: (workdir / "trainer.pid").exists(), what="the trainer to start")
        fill(mnt / "filler")
        os.kill(int((workdir / "agent.pid").read_text().split()[0]), 9)
        (row,) = json.loads(run_cli("status", "--json", check=True).stdout)
        assert row["state"] == "FAILED", row
        assert row["error"].startswith(f"disk full: No space left on device writing {workdir} on the instance's {mnt}")
        assert "signal" not in row["error"]
        wait_for(lambda: nothing_runs_on(mnt), timeout=30, what="the trainer to be stopped by the teardown")
        assert not (workdir / "instance.json").exists()
    finally:
        unmount(mnt)


def test_a_download_that_fills_the_disk_fails_the_job_with_the_real_cause(launchpad_home, tmp_path):
    """Pre-warm downloads a dataset (from a store URI) bigger than the instance's disk."""
    from launchpad_local import LocalProvider

    from launchpad.errors import JobFailed
    from launchpad.lifecycle import Lifecycle, SilentReporter
    from launchpad.recipe import load_recipe
    from launchpad.state import StateDB

    mnt = mount_tmpfs(tmp_path / "small-disk", "1m")
    try:
        bucket = tmp_path / "bucket"
        bucket.mkdir()
        rows = (REPO / "recipes" / "data" / "smoke-chat.jsonl").read_text()
        big = bucket / "big.jsonl"
        big.write_text(rows * (2 * 2**20 // len(rows) + 1))  # 2 MiB: twice the disk
        recipe = load_recipe(write_recipe(tmp_path, "bigdata", max_steps=10))
        recipe = recipe.model_copy(update={"datasets": [recipe.datasets[0].model_copy(update={"path": big.as_uri()})]})
        lc = Lifecycle(StateDB.open(), {"local": LocalProvider({"root": str(mnt)})}, {}, SilentReporter())
        job_id = lc.submit(recipe, "")
        with pytest.raises(JobFailed) as err:
            lc.run(job_id)
        error = lc.db.job(job_id).error
        assert error.startswith("disk full: No space left on device writing") and f"on the instance's {mnt}" in error
        assert "pre-warm of dataset[0] failed" in error and "\n" not in error
        assert lc.db.job(job_id).state.value == "FAILED"
        assert "disk full" in str(err.value)
        assert not list(mnt.iterdir()) and nothing_runs_on(mnt)
    finally:
        unmount(mnt)
