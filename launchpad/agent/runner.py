"""The agent's main sequence: pre-warm -> train (uploading checkpoints as they appear, watching for
preemption) -> drain uploads -> report -> watch for idleness -> stop the machine.

It works with the client gone: everything it needs is in the work directory (job.json) and the
environment it was started with.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..jobspec import AutostopSpec, JobSpec
from . import FILES, write_pidfile
from .nvme import choose_data_dir, read_lsblk
from .prewarm import prewarm
from .preemption import PreemptionWatcher
from .status import AgentStatus
from .uploader import QUEUE_DIR, AsyncUploader
from .watchdog import IdleWatchdog


class Agent:
    def __init__(self, workdir: Path):
        self.workdir = workdir.resolve()
        self.spec = JobSpec.load(self.workdir / FILES["spec"])
        self.job_id = self.spec.job_id
        self.status = AgentStatus(self.workdir, self.job_id)
        self.trainer: subprocess.Popen | None = None
        self.notice: str | None = None
        self._stopping = threading.Event()
        self._log_lock = threading.Lock()

    # -- small helpers -------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        with self._log_lock, open(self.workdir / FILES["log"], "a", encoding="utf-8") as f:
            f.write(f"[agent] {time.strftime('%H:%M:%S')} {message}\n")

    def trainer_running(self) -> bool:
        return self.trainer is not None and self.trainer.poll() is None

    def _signal(self, signum, _frame) -> None:  # teardown: stop the trainer, then ourselves
        self._stopping.set()
        if self.trainer_running():
            self.trainer.send_signal(signal.SIGTERM)

    # -- the sequence --------------------------------------------------------------------------------
    def run(self) -> int:
        write_pidfile(self.workdir / FILES["agent_pid"], os.getpid())
        (self.workdir / FILES["exit"]).unlink(missing_ok=True)
        signal.signal(signal.SIGTERM, self._signal)
        signal.signal(signal.SIGINT, self._signal)
        self.status.start()
        code = 1
        try:
            code = self._train()
        except Exception as e:  # the agent must always end with a status line, never silently
            self.log(f"error: {type(e).__name__}: {e}")
            self.status.set(phase="failed", error=f"agent: {type(e).__name__}: {e}")
        finally:
            self.status.write()
        if not self._stopping.is_set():
            self._watch_idle()
        self.status.stop()
        return code

    def _train(self) -> int:
        from ..storage import open_store

        recipe = dict(self.spec.recipe)
        store = open_store(self.spec.checkpoint_uri)

        # 1. pre-warm: dataset || weights || environment, onto local NVMe when there is some
        self.status.set(phase="prewarm")
        data_dir = choose_data_dir([self.workdir / "data"], lsblk_json=read_lsblk(),
                                   allow_mount=self.spec.mount_nvme, expect_nvme=self.spec.expect_nvme)
        data_root = data_dir.path if data_dir.kind == "fallback" else data_dir.path / "launchpad" / self.job_id
        info: dict[str, Any] = {"data_dir": str(data_root), "disk": data_dir.kind, "warning": data_dir.warning}
        if data_dir.warning:
            self.log(f"warning: {data_dir.warning}")
        self.status.set(prewarm=info)
        try:
            result = prewarm(recipe, data_root, self.workdir,
                             report=lambda snap: self.status.set(prewarm={**info, **snap}))
        except RuntimeError as e:
            return self._fail(str(e))
        self.status.set(prewarm={**info, "parts": result.parts, "seconds": round(result.seconds, 2),
                                 "done_bytes": sum(p["done_bytes"] for p in result.parts.values()),
                                 "total_bytes": sum(p["total_bytes"] for p in result.parts.values())})
        self._record_env()
        self.log(f"pre-warm done in {result.seconds:.1f}s ({', '.join(result.parts) or 'nothing to fetch'})")
        if self._stopping.is_set():
            return self._finish(143, "stopped during pre-warm")

        # 2. train, with checkpoints handed to the uploader and the preemption watcher on
        trainer_spec = self.spec.replace(recipe=result.recipe, status_path=str(self.workdir / "trainer-status.json"))
        spec_path = self.workdir / "job.trainer.json"
        trainer_spec.write(spec_path)  # 0600, like job.json, whatever the agent's umask

        from ..recipe import recipe_hash

        uploader = AsyncUploader(
            store, self.job_id, self.workdir / QUEUE_DIR, keep=self.spec.checkpoint_keep,
            recipe_hash=recipe_hash(self.spec.recipe_model()),
            on_uploaded=lambda ref: self.status.set(last_checkpoint={"step": ref.step, "uri": ref.uri}),
            log=self.log,
        ).start()
        watcher = PreemptionWatcher(list(self.spec.preemption), self._on_notice,
                                    interval=self.spec.preemption_poll_seconds, log=self.log).start()
        code = self._run_trainer(spec_path, trainer_spec, uploader)
        watcher.stop()

        # 3. the trainer is done: finish the uploads before saying anything is complete
        self.status.set(phase="uploading")
        drained = uploader.drain()
        if uploader.error or not drained:
            return self._finish(code or 1, uploader.error or "uploads did not finish")
        if self.notice:
            return self._finish(code, self.notice, phase="interrupted")
        if code != 0:
            trainer_err = self.status.trainer().get("error")
            return self._finish(code, trainer_err or f"trainer exited with {code}")
        return self._finish(0, None, phase="done")

    def _run_trainer(self, spec_path: Path, trainer_spec: JobSpec, uploader: AsyncUploader) -> int:
        cmd, extra_env = trainer_command(spec_path, trainer_spec)
        env = {**os.environ, **extra_env, "LAUNCHPAD_AGENT_UPLOAD_QUEUE": str(self.workdir / QUEUE_DIR)}
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.workdir / FILES["log"], "ab", buffering=0) as log:
            self.trainer = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, cwd=self.workdir)
        write_pidfile(self.workdir / FILES["trainer_pid"], self.trainer.pid)
        self.status.release_phase()
        self.log(f"trainer started (pid {self.trainer.pid})")
        stopped_for_store = False
        while (code := self.trainer.poll()) is None:
            if uploader.error and not stopped_for_store:
                # Training on without a working store only makes checkpoints nobody can resume from.
                self.log("stopping the trainer: its checkpoints cannot reach the store")
                self.trainer.send_signal(signal.SIGTERM)
                stopped_for_store = True
            time.sleep(0.5)
        self.log(f"trainer exited with {code}")
        tmp = self.workdir / (FILES["exit"] + ".tmp")
        tmp.write_text(f"{code}\n")
        os.replace(tmp, self.workdir / FILES["exit"])
        return code

    def _on_notice(self, reason: str) -> None:
        """Preemption: save now, wait for that checkpoint to be complete in the store, stop training."""
        self.notice = reason
        self.log(f"{reason}: saving a checkpoint now")
        self.status.set(error=reason)
        step = int(self.status.trainer().get("step") or 0)
        (self.workdir / FILES["save_now"]).touch()
        deadline = time.monotonic() + self.spec.preemption_save_seconds
        while time.monotonic() < deadline and self.trainer_running():
            last = self.status.get("last_checkpoint") or {}
            if (last.get("step") or -1) >= step:
                break
            time.sleep(0.2)
        if self.trainer_running():
            self.trainer.send_signal(signal.SIGTERM)

    def _record_env(self) -> None:
        try:
            self.status.set(env=json.loads((self.workdir / "env.json").read_text()))
        except (OSError, ValueError):
            pass

    def _fail(self, error: str) -> int:
        self.log(f"error: {error}")
        (self.workdir / FILES["exit"]).write_text("1\n")
        return self._finish(1, error)

    def _finish(self, code: int, error: str | None, phase: str | None = None) -> int:
        phase = phase or ("done" if code == 0 else "failed")
        self.status.set(phase=phase, error=error, finished_at=time.time())
        self.log(f"job {phase}" + (f": {error}" if error else ""))
        return code

    # -- after the job: stop the machine once nobody uses it -----------------------------------------
    def _watch_idle(self) -> None:
        autostop = self.spec.autostop
        idle_seconds = autostop.seconds
        dog = IdleWatchdog(idle_seconds, trainer_running=self.trainer_running, gpu_threshold=autostop.gpu_threshold)
        poll = min(5.0, max(0.2, idle_seconds / 10))
        while not self._stopping.is_set():
            idle = dog.idle_for()
            self.status.set(idle_seconds=round(idle, 1), busy=dog.reason_busy)
            if idle >= idle_seconds:
                self._autostop(autostop, idle)
                return
            self._stopping.wait(poll)

    def _autostop(self, autostop: AutostopSpec, idle: float) -> None:
        action, command = autostop.action, autostop.command
        record = {"action": action, "idle_seconds": round(idle, 1), "at": time.time(),
                  "command": list(command) if command else None}
        (self.workdir / "autostopped.json").write_text(json.dumps(record))
        self.status.set(autostop=record)
        if not command:
            self.log(f"idle for {idle:.0f}s: nothing bills here, so the agent just ends ({action})")
            return
        self.log(f"idle for {idle:.0f}s: running the {action} command")
        try:  # argv list from the provider: never through a shell
            subprocess.run(list(command), check=False, timeout=120, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as e:
            self.log(f"error: the {action} command failed: {e}")


def trainer_command(spec_path: Path, spec: JobSpec) -> tuple[list[str], dict[str, str]]:
    """The trainer's argv (+ env): a launcher for DeepSpeed/multi-node when the trainer package has one."""
    try:
        from ..train.launch import trainer_command as build
    except ImportError:
        return [sys.executable, "-m", "launchpad.train", "--spec", str(spec_path)], {}
    return build(spec_path, spec)


def main(workdir: Path) -> int:
    return Agent(workdir).run()
