"""The `local` provider: this machine. The embedded default and the template for new providers.

An "instance" is a work directory under ``<launchpad data dir>/local/instances/<id>/`` plus the agent
and trainer processes started in it. ``instance.json`` in that directory carries the job tag, so
`instances()` finds every job's processes even if the state database is deleted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from launchpad.agent import FILES, pid_alive
from launchpad.agent.workdir import job_state
from launchpad.agent.workdir import salvage as salvage_workdir
from launchpad.agent.workdir import stop as stop_workdir
from launchpad.errors import ProviderError
from launchpad.jobspec import JobSpec
from launchpad.models import (
    JOB_TAG,
    Bundle,
    Capability,
    CheckpointRef,
    Instance,
    InstanceSpec,
    InstanceState,
    JobProgress,
    Offer,
    TeardownMode,
    TrainHandle,
)
from launchpad.plugins import hookimpl
from launchpad.provider import Provider

log = logging.getLogger("launchpad.local")


@hookimpl
def launchpad_register_providers(register):
    register(LocalProvider)


class LocalProvider(Provider):
    name = "local"
    unsupported = {
        Capability.MULTI_NODE: "local runs on this one machine",
        Capability.SPOT: "this machine has no spot market",
        Capability.NVME: "local uses whatever disk this machine has",
    }

    # The Popen handles of agents this process started, so they are reaped rather than left as zombies.
    _children: dict[str, subprocess.Popen] = {}

    @property
    def root(self) -> Path:
        from launchpad.settings import data_dir

        return Path(self.config.get("root") or data_dir() / "local" / "instances")

    def default_checkpoint_uri(self) -> str:
        from launchpad.settings import data_dir

        return (data_dir() / "checkpoints").as_uri()

    def check(self) -> str | None:
        return None  # this machine is always there

    def offers(self) -> list[Offer]:
        try:
            mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        except (ValueError, OSError, AttributeError):
            mem_gb = 0.0
        return [
            Offer(provider=self.name, instance_type="this-machine", region="local", vcpus=float(os.cpu_count() or 1),
                  memory_gb=round(mem_gb, 1), price_per_hour=0.0)
        ]

    # -- lifecycle ---------------------------------------------------------------------------------
    def _dir(self, instance: Instance) -> Path:
        return self.root / instance.id

    def provision(self, offer: Offer, spec: InstanceSpec) -> Instance:
        # Name-based idempotency: the instance id is a function of the token.
        instance_id = "local-" + hashlib.sha256(spec.token.encode()).hexdigest()[:12]
        workdir = self.root / instance_id
        meta = workdir / "instance.json"
        if meta.exists():
            return self._load(workdir)
        from launchpad.settings import make_private

        make_private(workdir)  # 0700, and a umask of 077 for the files the agent and trainer write in it
        instance = Instance(
            provider=self.name, id=instance_id, job_id=spec.job_id, state=InstanceState.RUNNING, offer=offer,
            address="localhost", created_at=time.time(),
            data={"workdir": str(workdir), "token": spec.token, "tags": {JOB_TAG: spec.job_id, **spec.tags}},
        )
        _write_json(meta, instance.to_dict())
        return instance

    def sync(self, instance: Instance, bundle: Bundle) -> None:
        workdir = self._dir(instance)
        if not workdir.exists():
            raise ProviderError(f"local instance {instance.id} is gone", provider=self.name)
        spec = bundle.job_spec.replace(
            workdir=str(workdir), status_path=str(workdir / FILES["status"]),
            # Nothing bills on this machine: when idle, the agent just ends, unless a command is configured.
            autostop={"command": self.config.get("autostop_command"), "idle_seconds": self.config.get("idle_seconds")},
            preemption=self.config.get("preemption") or (),  # e.g. ["aws"] against a metadata double
            preemption_poll_seconds=float(self.config.get("preemption_poll_seconds", 2.0)),
            mount_nvme=False,  # never format or mount disks on the user's own machine
            expect_nvme=False,
        )
        try:
            spec.write(workdir / FILES["spec"])  # never the resolved env: secrets stay in memory
            (workdir / "recipe.yaml").write_text(bundle.recipe_text)
        except OSError as e:
            raise ProviderError(f"local instance {instance.id}: cannot write the job there: {_why(workdir, e)}",
                                provider=self.name) from None

    def train(self, instance: Instance, bundle: Bundle) -> TrainHandle:
        workdir = self._dir(instance)
        if pid := pid_alive(workdir / FILES["agent_pid"]):
            return TrainHandle(instance.id, pid)
        (workdir / FILES["exit"]).unlink(missing_ok=True)
        env = {**os.environ, **bundle.env, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
        with open(workdir / "agent.log", "ab") as log:
            # argv list, no shell: nothing from the recipe is ever interpreted by a shell
            proc = subprocess.Popen(
                [sys.executable, "-m", "launchpad.agent", "--workdir", str(workdir)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=workdir,
                start_new_session=True,  # survives Ctrl-C in, and the exit of, the launching process
            )
        self._children[instance.id] = proc
        for _ in range(100):  # the agent writes its pid file first thing
            if (workdir / FILES["agent_pid"]).exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        return TrainHandle(instance.id, proc.pid, time.time())

    def _agent_running(self, workdir: Path, instance_id: str) -> bool:
        child = self._children.get(instance_id)
        if child is not None and child.poll() is not None:
            return False
        return pid_alive(workdir / FILES["agent_pid"]) is not None

    def progress(self, instance: Instance) -> JobProgress:
        workdir = self._dir(instance)
        state = job_state(workdir, alive=self._agent_running(workdir, instance.id))
        return JobProgress.from_status(state.status, running=state.running, exit_code=state.exit_code)

    def logs(self, instance: Instance, *, follow: bool = False) -> Iterator[str]:
        path = self._dir(instance) / FILES["log"]
        while follow and not path.exists() and self.progress(instance).running:
            time.sleep(0.2)
        if not path.exists():
            return
        with open(path, encoding="utf-8", errors="replace") as f:
            while True:
                line = f.readline()
                if line:
                    yield line.rstrip("\n")
                    continue
                if not follow or not self.progress(instance).running:
                    yield from (line.rstrip("\n") for line in f.readlines())
                    return
                time.sleep(0.2)

    def request_save(self, instance: Instance) -> None:
        workdir = self._dir(instance)
        if workdir.is_dir():
            (workdir / FILES["save_now"]).touch()

    def latest_checkpoint(self, instance: Instance) -> CheckpointRef | None:
        from launchpad.storage import open_store
        from launchpad.storage.checkpoints import latest_checkpoint

        path = self._dir(instance) / FILES["spec"]
        if not path.exists():
            return None  # never synced: no store known, no checkpoint
        spec = JobSpec.load(path)
        if spec.checkpoint_uri is None:
            return None  # no store known, no checkpoint
        return latest_checkpoint(open_store(spec.checkpoint_uri), spec.job_id)

    def salvage(self, instance: Instance) -> list[CheckpointRef]:
        workdir = self._dir(instance)
        if not workdir.is_dir() or self._agent_running(workdir, instance.id):
            return []
        out = salvage_workdir(workdir, log=lambda m: log.info("%s: %s", instance.id, m))
        return [CheckpointRef(**r) for r in out.get("uploaded", [])]

    def teardown(self, instance: Instance, mode: TeardownMode = TeardownMode.TERMINATE) -> None:
        workdir = self._dir(instance)
        if not workdir.exists():
            return
        stop_workdir(workdir)
        child = self._children.pop(instance.id, None)
        if child is not None:
            child.poll()
        if mode is TeardownMode.STOP:
            meta = json.loads((workdir / "instance.json").read_text())
            _write_json(workdir / "instance.json", {**meta, "state": InstanceState.STOPPED.value})
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    def status(self, instance: Instance) -> InstanceState:
        workdir = self._dir(instance)
        if not (workdir / "instance.json").exists():
            return InstanceState.TERMINATED
        if (workdir / "autostopped.json").exists() and not self._agent_running(workdir, instance.id):
            return InstanceState.STOPPED  # the idle watchdog ended the agent: nothing runs, nothing bills
        return self._load(workdir).state

    def instances(self) -> list[Instance]:
        if not self.root.exists():
            return []
        found = []
        for meta in sorted(self.root.glob("*/instance.json")):
            try:
                found.append(self._load(meta.parent))
            except (OSError, ValueError, KeyError):
                continue  # half-written by a provision that was interrupted: it has no processes yet
        return found

    def _load(self, workdir: Path) -> Instance:
        return Instance.from_dict(json.loads((workdir / "instance.json").read_text()))


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def _why(path: Path, e: OSError) -> str:
    import errno

    if e.errno == errno.ENOSPC:
        from launchpad.train.status import disk_full_message

        return disk_full_message(path, e)
    return f"{e.strerror or e} ({path})"
