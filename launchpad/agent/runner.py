"""The agent's main sequence: pre-warm -> train (uploading checkpoints as they appear, watching for
preemption) -> drain uploads -> report -> watch for idleness -> stop the machine.

It works with the client gone: everything it needs is in the work directory (job.json) and the
environment it was started with.

A full disk (ENOSPC) never kills it. Every write of its own (train.log, status.json, pid and exit files,
job.trainer.json) goes through one check; when one fails for space, or the trainer says the disk is
full, it stops the trainer, lets the uploader finish what was handed to it, frees its scratch on that
disk (the trainer's local checkpoint-N folders, which only the store counts, and a small reserve file
it allocated at start), then writes a final status naming the cause: "disk full: No space left on
device writing <path> on the instance's <mount> ...". Pre-warmed data is never deleted: a resume on
the same machine reuses it, and the reserve plus the checkpoint scratch make enough room to report.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..jobspec import AutostopSpec, JobSpec
from ..train.status import (
    DISK_FULL_EXIT,
    DISK_FULL_PREFIX,
    disk_full_message,
    disk_nearly_full,
    disk_usage,
    human_bytes,
    is_disk_full,
    newest_checkpoint_dir,
)
from . import FILES, proctree, write_pidfile
from .nvme import choose_data_dir, read_lsblk
from .preemption import PreemptionWatcher
from .prewarm import prewarm
from .status import AgentStatus
from .store_heartbeat import StoreHeartbeat
from .uploader import QUEUE_DIR, AsyncUploader
from .watchdog import IdleWatchdog, run_autostop

#: Allocated at start, deleted to make room for the final status when the disk fills up.
RESERVE_FILE = ".agent-reserve"
RESERVE_BYTES = 256 * 1024
#: Where the trainer writes its checkpoint-N folders (launchpad.train.spec.TrainJob.output_dir): scratch.
TRAINER_OUTPUT = "output"
#: When a write of the agent's fails for space, how long the trainer gets to notice (and report) it
#: itself before it is stopped; then how long it gets to unwind before it is killed.
DISK_FULL_TRAINER_GRACE = 5.0
DISK_FULL_STOP_GRACE = 30.0
#: How long the end of a job waits for the wheel cache's upload (launchpad.wheelcache) to finish.
WHEEL_CACHE_WAIT = 900.0
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


class Agent:
    def __init__(self, workdir: Path):
        self.workdir = workdir.resolve()
        self.spec = JobSpec.load(self.workdir / FILES["spec"])
        self.job_id = self.spec.job_id
        self.status = AgentStatus(self.workdir, self.job_id, on_disk_full=self._on_disk_full)
        self.trainer: subprocess.Popen | None = None
        self.notice: str | None = None
        self.disk_full: tuple[Path, OSError] | None = None  # the first write of ours that failed for space
        self._disk_full_seen = threading.Event()
        self._stopping = threading.Event()
        self._log_lock = threading.Lock()
        self._unlogged: list[str] = []  # lines a full disk refused; written with the next line that fits
        self._exit_code: int | None = None  # the trainer's, to write again if the exit file did not fit

    # -- small helpers -------------------------------------------------------------------------------
    def log(self, message: str) -> None:
        """Append to train.log. Never raises: on a full disk the line waits in memory for room."""
        line = f"[agent] {time.strftime('%H:%M:%S')} {message}\n"
        path = self.workdir / FILES["log"]
        with self._log_lock:
            pending = self._unlogged + [line]
            try:
                with open(path, "a", encoding="utf-8") as f:
                    f.write("".join(pending))
                self._unlogged = []
            except OSError as e:
                self._unlogged = pending[-200:]
                if is_disk_full(e):
                    self._on_disk_full(path, e)
                else:  # agent.log (stderr) is the last place left to say it
                    _stderr(f"[agent] cannot write {path}: {e}; {message}")

    def _on_disk_full(self, path: Path, error: OSError) -> None:
        if self.disk_full is None:
            self.disk_full = (path, error)
        self._disk_full_seen.set()

    def _write(self, path: Path, write) -> bool:
        """Run `write()` (which writes `path`); False, with the disk-full noted, if the disk is full."""
        try:
            write()
        except OSError as e:
            if not is_disk_full(e):
                raise
            self._on_disk_full(path, e)
            return False
        return True

    def _write_exit(self, code: int) -> bool:
        self._exit_code = code
        tmp = self.workdir / (FILES["exit"] + ".tmp")

        def write() -> None:
            try:
                tmp.write_text(f"{code}\n")
                os.replace(tmp, self.workdir / FILES["exit"])
            finally:
                tmp.unlink(missing_ok=True)

        return self._write(self.workdir / FILES["exit"], write)

    def _reserve(self) -> None:
        """Hold RESERVE_BYTES of the work directory's disk, to give back for the final status."""
        path = self.workdir / RESERVE_FILE
        try:
            with open(path, "wb") as f:
                try:
                    os.posix_fallocate(f.fileno(), 0, RESERVE_BYTES)
                except (AttributeError, OSError) as e:
                    if is_disk_full(e):
                        raise
                    f.write(b"\0" * RESERVE_BYTES)  # no fallocate here: zeros take the blocks too
        except OSError as e:
            path.unlink(missing_ok=True)
            if not is_disk_full(e):
                raise
            self._on_disk_full(path, e)

    def _release_reserve(self) -> None:
        (self.workdir / RESERVE_FILE).unlink(missing_ok=True)

    def trainer_running(self) -> bool:
        return self.trainer is not None and self.trainer.poll() is None

    def _terminate_trainer(self, grace: float | None = None) -> None:
        """SIGTERM the trainer if it runs; with `grace`, SIGKILL it when it has not ended by then."""
        trainer = self.trainer
        if trainer is None or trainer.poll() is not None:
            return
        # its workers, found while they are still its children (only needed if it may come to a SIGKILL)
        tree = proctree.track(trainer.pid) if grace is not None else {}
        trainer.send_signal(signal.SIGTERM)
        if grace is not None:
            try:
                trainer.wait(grace)
            except subprocess.TimeoutExpired:
                proctree.kill(tree)  # trainer.kill() alone would leave torchrun's workers running
                trainer.wait()

    def _signal(self, signum, _frame) -> None:  # teardown: stop the trainer, then ourselves
        self._stopping.set()
        self._terminate_trainer()

    # -- the sequence --------------------------------------------------------------------------------
    def run(self) -> int:
        pid_path = self.workdir / FILES["agent_pid"]
        self._write(pid_path, lambda: write_pidfile(pid_path, os.getpid()))
        (self.workdir / FILES["exit"]).unlink(missing_ok=True)
        signal.signal(signal.SIGTERM, self._signal)
        signal.signal(signal.SIGINT, self._signal)
        self._reserve()
        self.status.start()
        self.store_beat = StoreHeartbeat(self.spec, self.status, self.trainer_running, log=self.log).start()
        code = 1
        try:
            code = self._train()
        except OSError as e:
            if not is_disk_full(e):
                code = self._crashed(e)
            else:
                self._on_disk_full(Path(e.filename) if e.filename else self.workdir, e)
                code = self._end_disk_full(self._exit_code or 1)
        except Exception as e:  # the agent must always end with a status line, never silently
            code = self._crashed(e)
        finally:
            self.status.write()
        if not self._stopping.is_set():
            self._watch_idle()
        self.status.stop()
        self.store_beat.stop()
        return code

    def _crashed(self, e: Exception) -> int:
        self.log(f"error: {type(e).__name__}: {e}")
        self._release_reserve()
        self.status.set(phase="failed", error=f"agent: {type(e).__name__}: {e}")
        return 1

    def _train(self) -> int:
        from ..storage import open_store

        recipe = dict(self.spec.recipe)
        assert self.spec.checkpoint_uri  # JobSpec.load requires it on an instance
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
            if "No space left on device" in str(e) or "Disk quota exceeded" in str(e) or disk_nearly_full(data_root):
                # Partial downloads stay: they resume where they stopped on a machine with room.
                return self._end_disk_full(1, f"{disk_full_message(data_root)}; {e}")
            return self._fail(str(e))
        self.status.set(prewarm={**info, "parts": result.parts, "seconds": round(result.seconds, 2),
                                 "done_bytes": sum(p["done_bytes"] for p in result.parts.values()),
                                 "total_bytes": sum(p["total_bytes"] for p in result.parts.values())})
        self._record_env()
        self.status.mark("prewarm_done")
        self.log(f"pre-warm done in {result.seconds:.1f}s ({', '.join(result.parts) or 'nothing to fetch'})")
        wheel_cache = self._start_wheel_cache(store)  # off the critical path: after pre-warm, at nice 10
        if self._stopping.is_set():
            return self._finish(143, "stopped during pre-warm")

        # 2. train, with checkpoints handed to the uploader and the preemption watcher on
        trainer_spec = self.spec.replace(recipe=result.recipe, status_path=str(self.workdir / "trainer-status.json"))
        spec_path = self.workdir / "job.trainer.json"
        trainer_spec.write(spec_path)  # 0600, like job.json, whatever the agent's umask (ENOSPC: see run)
        if self._disk_full_seen.is_set():  # full before the trainer even started: do not start it
            return self._end_disk_full(1)

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
        if wheel_cache is not None:  # a teardown right after "done" must not cut the cache short
            wheel_cache.join(WHEEL_CACHE_WAIT)
        full = self._disk_full_cause(code)
        if full is not None:  # (the uploader's own error, if any, is the store's: see _end_disk_full)
            return self._end_disk_full(code or 1, full, uploader.error)
        if uploader.error or not drained:
            return self._finish(code or 1, uploader.error or "uploads did not finish")
        if self.notice:
            return self._finish(code, self.notice, phase="interrupted")
        if code != 0:
            said = self.status.trainer()
            if said.get("error"):
                return self._finish(code, said["error"])
            if code < 0:  # e.g. the kernel's OOM killer, or kill -9: the same words the client uses
                return self._finish(code, f"trainer was killed by signal {-code} ({_signal_name(-code)}) "
                                          f"at step {int(said.get('step') or 0)}")
            return self._finish(code, f"trainer exited with {code}")
        return self._finish(0, None, phase="done")

    def _run_trainer(self, spec_path: Path, trainer_spec: JobSpec, uploader: AsyncUploader) -> int:
        cmd, extra_env = trainer_command(spec_path, trainer_spec)
        env = {**os.environ, **extra_env, "LAUNCHPAD_AGENT_UPLOAD_QUEUE": str(self.workdir / QUEUE_DIR)}
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.workdir / FILES["log"], "ab", buffering=0) as log:
            self.trainer = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, cwd=self.workdir)
        pid_path = self.workdir / FILES["trainer_pid"]
        self._write(pid_path, lambda: write_pidfile(pid_path, self.trainer.pid))
        self.status.mark("trainer_start")
        self.status.release_phase()
        self.log(f"trainer started (pid {self.trainer.pid})")
        stopped_for_store = False
        disk_full_at: float | None = None
        stopped_for_disk: float | None = None
        while (code := self.trainer.poll()) is None:
            if uploader.error and not stopped_for_store:
                # Training on without a working store only makes checkpoints nobody can resume from.
                self.log("stopping the trainer: its checkpoints cannot reach the store")
                self.trainer.send_signal(signal.SIGTERM)
                stopped_for_store = True
            if self._disk_full_seen.is_set():
                # Its next checkpoint cannot be saved either. A trainer that is itself failing for space
                # exits with its own report (naming the checkpoint that did not fit); else stop it.
                now = time.monotonic()
                disk_full_at = disk_full_at or now
                if stopped_for_disk is None and now - disk_full_at >= DISK_FULL_TRAINER_GRACE:
                    self.log(f"stopping the trainer: the disk is full ({self.disk_full[0] if self.disk_full else ''})")
                    self.trainer.send_signal(signal.SIGTERM)
                    stopped_for_disk = now
                elif stopped_for_disk is not None and now - stopped_for_disk > DISK_FULL_STOP_GRACE:
                    proctree.kill(proctree.track(self.trainer.pid))
            time.sleep(0.5)
        self.log(f"trainer exited with {code}")
        self._write_exit(code)
        return code

    def _start_wheel_cache(self, store) -> threading.Thread | None:
        """Upload the wheelhouse sync installed from (launchpad.wheelcache) to the job's store, in the
        background, so the job's next instance installs from there. Never fails the job."""
        from ..wheelcache import PENDING_FILE, upload

        try:
            pending = json.loads((self.workdir / PENDING_FILE).read_text())
        except (OSError, ValueError):
            return None

        def work() -> None:
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
            except (AttributeError, OSError):
                pass
            self.status.set(wheel_cache={"state": "uploading", "key": pending.get("key")})
            try:
                summary = upload(store, pending, log=self.log, stop=self._stopping.is_set)
                if summary["state"] in ("done", "present") and Path(pending["dir"]).parent.name == "wheelhouse":
                    # the store has it: free the host's disk
                    shutil.rmtree(pending["dir"], ignore_errors=True)
            except Exception as e:  # a cache is an optimisation: the job goes on without it
                summary = {"state": "failed", "key": pending.get("key"), "error": f"{type(e).__name__}: {e}"}
                self.log(f"wheel cache: upload failed: {summary['error']}")
            self.status.set(wheel_cache=summary)

        thread = threading.Thread(target=work, name="wheel-cache", daemon=True)
        thread.start()
        return thread

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
        self._terminate_trainer()

    def _record_env(self) -> None:
        try:
            self.status.set(env=json.loads((self.workdir / "env.json").read_text()))
        except (OSError, ValueError):
            pass

    def _fail(self, error: str) -> int:
        self.log(f"error: {error}")
        self._write_exit(1)
        return self._finish(1, error)

    def _finish(self, code: int, error: str | None, phase: str | None = None) -> int:
        phase = phase or ("done" if code == 0 else "failed")
        self._release_reserve()  # the job is over: the room it kept for this last report is not needed
        self.status.set(phase=phase, error=error, finished_at=time.time())
        self.log(f"job {phase}" + (f": {error}" if error else ""))
        return code

    # -- a full disk ---------------------------------------------------------------------------------
    def _disk_full_cause(self, code: int) -> str | None:
        """The disk-full line when the job ends because the work directory's disk is full, else None:
        a write of ours failed for space, or the trainer said so (its exit code, its status), or it
        failed while that disk is (nearly) full (some writers, torch's zip writer among them, report a
        full disk without an errno)."""
        if code == 0:  # trained to the end, last checkpoint handed over: a full disk did not stop it
            return None
        said = str(self.status.trainer().get("error") or "")
        if said.startswith(DISK_FULL_PREFIX):  # the trainer's names the checkpoint it could not save
            return said
        if code == DISK_FULL_EXIT and (line := self._trainer_said_disk_full()):
            return line  # its status did not fit on the disk; its last words in the log did
        if self.disk_full is not None and code != DISK_FULL_EXIT:
            return ""  # ours: _end_disk_full names the write that failed
        # (a trainer stopped on purpose, for a preemption notice, failed for that, however full the disk)
        guess = not self.notice and disk_nearly_full(self.workdir)
        if code == DISK_FULL_EXIT or "No space left on device" in said or guess:
            where = newest_checkpoint_dir(self.workdir / TRAINER_OUTPUT) or self.workdir
            return disk_full_message(where) + (f"; the trainer's error: {said}" if said else "")
        return None

    def _trainer_said_disk_full(self) -> str | None:
        """The trainer's own "error: disk full: ..." line from the end of train.log, if it got there."""
        try:
            with open(self.workdir / FILES["log"], "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
                tail = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return None
        prefix = f"error: {DISK_FULL_PREFIX}"
        return next((line[len("error: "):].strip() for line in reversed(tail) if line.startswith(prefix)), None)

    def _end_disk_full(self, code: int, cause: str | None = None, store_error: str | None = None) -> int:
        """Make room on the full disk, then end the job with a final status that names the cause."""
        self._terminate_trainer(DISK_FULL_STOP_GRACE)  # e.g. job.trainer.json did not fit: no trainer left behind
        if not cause:
            path, error = self.disk_full or (self.workdir, None)
            cause = disk_full_message(path, error)
        freed = self._free_scratch()
        self._release_reserve()
        if self._exit_code is not None:
            self._write_exit(self._exit_code)  # again, in case the first one did not fit
        elif not (self.workdir / FILES["exit"]).exists():
            self._write_exit(code)
        notes = [f"freed {human_bytes(freed)} of local checkpoint scratch"] if freed > 0 else []
        if store_error:
            notes.append(store_error)
        notes.append("give the instance a bigger disk (resources.disk) or save checkpoints less often")
        message = "; ".join([cause, *notes])
        code = self._finish(code if code not in (None, 0) else 1, message)
        if not self.status.written:  # even the reserve was not enough: say it where it may still fit
            _stderr(f"[agent] job failed: {message}")
        return code

    def _free_scratch(self) -> int:
        """Delete what only this machine's scratch holds and nothing needs any more; bytes freed.

        - the trainer's local checkpoint-N folders (output/): the store holds every complete checkpoint
          and a resume never trusts local ones. While a trainer still runs (it could not be stopped),
          only those already complete in the store go;
        - hand-overs to the uploader that never completed (upload-queue/checkpoint-N.tmp).
        Never: complete hand-overs the uploader could not upload (the only copy), pre-warmed data."""
        usage = disk_usage(self.workdir)
        trainer_gone = not self.trainer_running()
        uploaded = int((self.status.get("last_checkpoint") or {}).get("step") or -1)
        output = self.workdir / TRAINER_OUTPUT
        try:
            folders = [(int(m.group(1)), p) for p in output.iterdir() if (m := _CHECKPOINT.match(p.name))]
        except OSError:
            folders = []
        deleted = []
        for step, folder in sorted(folders):
            if trainer_gone or step <= uploaded:
                shutil.rmtree(folder, ignore_errors=True)
                deleted.append(folder.name)
        for tmp in (self.workdir / QUEUE_DIR).glob("checkpoint-*.tmp"):
            shutil.rmtree(tmp, ignore_errors=True)
        after = disk_usage(self.workdir)
        freed = max(0, after[1] - usage[1]) if usage and after else 0
        if deleted:
            self.log(f"disk full: deleted the local {', '.join(deleted)} under {output} ({human_bytes(freed)})")
        return freed

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
        run_autostop(self.workdir, autostop, idle, status=self.status, log=self.log, write=self._write,
                     before=self.store_beat.write_now)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _stderr(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def trainer_command(spec_path: Path, spec: JobSpec) -> tuple[list[str], dict[str, str]]:
    """The trainer's argv (+ env): a launcher for DeepSpeed/multi-node when the trainer package has one."""
    try:
        from ..train.launch import trainer_command as build
    except ImportError:
        return [sys.executable, "-m", "launchpad.train", "--spec", str(spec_path)], {}
    return build(spec_path, spec)


def main(workdir: Path) -> int:
    return Agent(workdir).run()
