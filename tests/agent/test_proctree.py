"""Stopping a job reaches every process it started: a real torchrun whose worker (in a session of its
own, as torch.distributed.elastic starts them) does not end on SIGTERM, as a worker blocked in a
collective whose peer is gone does not. Before, `stop` SIGKILLed the agent's group and torchrun and
left the worker running and writing into the work directory teardown was about to delete."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from launchpad.agent import FILES, process_start_time, proctree, write_pidfile
from launchpad.agent.workdir import stop

# The "agent": a session leader that starts torchrun and records both pids, as the real agent does.
AGENT = textwrap.dedent("""
    import os, subprocess, sys, time
    from pathlib import Path
    from launchpad.agent import FILES, write_pidfile
    workdir = Path(sys.argv[1])
    write_pidfile(workdir / FILES["agent_pid"], os.getpid())
    trainer = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "1",
                                "--master_port", sys.argv[2], str(workdir / "worker.py"), str(workdir)])
    write_pidfile(workdir / FILES["trainer_pid"], trainer.pid)
    trainer.wait()
""")

# The "worker": ignores SIGTERM and keeps writing into the work directory.
WORKER = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    beat = Path(sys.argv[1]) / "beat"
    (Path(sys.argv[1]) / "worker.pid").write_text(str(os.getpid()))
    while True:
        beat.parent.mkdir(parents=True, exist_ok=True)
        beat.write_text(str(time.time()))
        time.sleep(0.05)
""")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_stop_ends_torchruns_workers_too_and_nothing_writes_afterwards(tmp_path):
    workdir = tmp_path / "job"
    workdir.mkdir()
    (workdir / "worker.py").write_text(WORKER)
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(workdir), str(_free_port())], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tree: proctree.Tracked = {}
    try:
        _wait_for(workdir / "worker.pid")
        worker = int((workdir / "worker.pid").read_text())
        assert os.getsid(worker) == worker and os.getsid(worker) != os.getsid(agent.pid)  # a session of its own
        tree = proctree.track(agent.pid)
        assert worker in tree and len(tree) >= 3

        stopped = stop(workdir, grace=1.0)

        assert agent.pid in stopped
        assert process_start_time(worker) is None, "torchrun's worker still runs"
        assert proctree.alive(tree) == {}
        shutil.rmtree(workdir)  # what teardown does next
        time.sleep(0.5)
        assert not workdir.exists(), "a process of the job wrote into the work directory after stop"
    finally:  # whatever happened above, the test leaves nothing running
        proctree.kill({**tree, **proctree.track(agent.pid)})
        agent.wait()


def test_tracking_ignores_a_reused_pid_and_a_dead_tree(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    tree = proctree.track(proc.pid)
    assert set(tree) == {proc.pid}
    assert proctree.alive({proc.pid: "0"}) == {}  # same pid, another start time: not ours
    proc.kill()
    proc.wait()
    assert proctree.alive(tree) == {} and proctree.kill(tree) == {}
    write_pidfile(tmp_path / FILES["agent_pid"], proc.pid)
    assert stop(tmp_path, grace=0.1) == []  # nothing runs: nothing to stop, at once
