"""status.json: what the trainer is doing, readable without parsing logs (DESIGN.md, "Heartbeat").

Keys (read by `launchpad.models.JobProgress.from_status`):
    job_id, pid, phase (loading|training|saving|done|failed), step, total_steps, epoch, loss,
    losses [[step, loss], ...] (the newest MAX_LOSSES), eval_loss, eval_losses [[step, loss], ...], tokens_per_s,
    step_seconds (mean seconds per optimizer step since the first step ended: the ETA's basis),
    last_checkpoint {"step", "uri"} | null, resumed_from {"step", "uri"} | null,
    heartbeat (unix time of the last write), started_at, finished (bool), error (one line | null),
    phase_times {phase: unix time it first began, "first_step": the first optimizer step's end}

Every write replaces the file atomically (temp file + os.replace), so a reader never sees half a
document. A heartbeat thread rewrites it every `interval` seconds so a reader can tell a live trainer
from a dead one even while one step takes long. A logged loss is written at most every `loss_gap`
seconds (the heartbeat thread writes the newest one within that time): one write per step was ~3% of
a small model's training time, a document of up to MAX_LOSSES pairs serialised dozens of times a
second for readers that poll once a second. Everything else (phase, checkpoint, error) is written at once.

A full disk (ENOSPC, or a quota: EDQUOT) never raises out of a status write: the document stays in
memory, `write_error` says why it is not on disk, and the next write tries again. The helpers at the
end (`disk_full_cause`, `disk_full_message`) name a full disk the same way in the trainer and the agent.
"""

from __future__ import annotations

import errno
import json
import os
import re
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

MAX_LOSSES = 2000
PHASES = ("loading", "training", "saving", "done", "failed")

#: The trainer's exit code when it stopped because the instance's disk is full (errno ENOSPC).
DISK_FULL_EXIT = 28
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: How a disk-full error begins, wherever it is reported (trainer-status.json, status.json, the job).
DISK_FULL_PREFIX = "disk full:"


class StatusWriter:
    """Thread-safe owner of one status.json. Use `update(**fields)`; `start()`/`stop()` the heartbeat."""

    def __init__(self, path: Path, job_id: str, *, interval: float = 5.0, loss_gap: float = 0.5):
        self.path = Path(path)
        self.interval = interval
        self.loss_gap = loss_gap
        self._written_at = float("-inf")  # time.monotonic() of the last write
        self._dirty = False  # a logged loss waits in memory for the next write
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.write_error: OSError | None = None  # the disk-full error of the last write that failed, if any
        now = time.time()
        self._doc: dict[str, Any] = {
            "job_id": job_id,
            "pid": os.getpid(),
            "phase": "loading",
            "step": 0,
            "total_steps": None,
            "epoch": None,
            "loss": None,
            "losses": [],
            "eval_loss": None,
            "eval_losses": [],
            "tokens_per_s": None,
            "step_seconds": None,
            "last_checkpoint": None,
            "resumed_from": None,
            "heartbeat": now,
            "started_at": now,
            "finished": False,
            "error": None,
            "phase_times": {"loading": now},  # when each phase first began, and "first_step"
        }

    @property
    def doc(self) -> dict[str, Any]:
        with self._lock:
            return json.loads(json.dumps(self._doc))

    def update(self, **fields: Any) -> None:
        """Merge `fields` into the document and write it now."""
        if "phase" in fields and fields["phase"] not in PHASES:
            raise ValueError(f"unknown phase {fields['phase']!r}")
        with self._lock:
            self._doc.update(fields)
            if "phase" in fields:
                self._doc["phase_times"].setdefault(fields["phase"], time.time())
            self._write_locked()

    def mark(self, name: str) -> None:
        """Record when `name` first happened (e.g. "first_step") in phase_times, and write."""
        with self._lock:
            if name not in self._doc["phase_times"]:
                self._doc["phase_times"][name] = time.time()
                self._write_locked()

    def add_loss(self, step: int, loss: float, **fields: Any) -> None:
        """Record one logged loss (kept to the newest MAX_LOSSES) and write."""
        with self._lock:
            losses = self._doc["losses"]
            if losses and losses[-1][0] >= step:  # a resumed run re-logs nothing older than it has
                losses[:] = [pair for pair in losses if pair[0] < step]
            losses.append([int(step), float(loss)])
            del losses[:-MAX_LOSSES]
            self._doc.update(step=int(step), loss=float(loss), **fields)
            if time.monotonic() - self._written_at >= self.loss_gap:
                self._write_locked()
            else:
                self._dirty = True  # the heartbeat thread (or the next update) writes it

    def flush(self) -> None:
        """Write the document now if a logged loss is waiting."""
        with self._lock:
            if self._dirty:
                self._write_locked()

    def add_eval_loss(self, step: int, loss: float) -> None:
        """Record one evaluation's loss (the newest MAX_LOSSES kept) and write."""
        with self._lock:
            evals = self._doc["eval_losses"]
            evals[:] = [pair for pair in evals if pair[0] < step]
            evals.append([int(step), float(loss)])
            del evals[:-MAX_LOSSES]
            self._doc["eval_loss"] = float(loss)
            self._write_locked()

    def _write_locked(self) -> None:
        self._doc["heartbeat"] = time.time()
        self._written_at, self._dirty = time.monotonic(), False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.path, self._doc)
        except OSError as e:
            if not is_disk_full(e):
                raise
            self.write_error = e  # a full disk must not turn every status update into a traceback
        else:
            self.write_error = None

    def start(self) -> StatusWriter:
        self.update()
        self._thread = threading.Thread(target=self._beat, name="launchpad-heartbeat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 1)
        try:
            self.flush()
        except OSError:
            pass

    def _beat(self) -> None:
        while not self._stop.wait(min(self.interval, self.loss_gap)):
            try:
                with self._lock:
                    if self._dirty or time.monotonic() - self._written_at >= self.interval:
                        self._write_locked()
            except OSError:  # a full disk must not kill training; the next beat tries again
                pass


def atomic_write_json(path: Path, doc: Any) -> None:
    """Replace `path` with `doc` as JSON in one step: a reader sees the old document or the new one."""
    fd, tmp = tempfile.mkstemp(prefix=".status-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- a full disk, named the same way by the trainer and the agent ---------------------------------------
def is_disk_full(exc: BaseException | None) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def disk_full_error(exc: BaseException | None) -> OSError | None:
    """The ENOSPC/EDQUOT OSError in `exc`'s chain (raise ... from, or raised while handling), if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if is_disk_full(exc):
            return exc  # type: ignore[return-value]
        exc = exc.__cause__ or exc.__context__
    return None


def _existing(path: Path) -> Path:
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def mount_point(path: str | Path) -> Path:
    """The mount point of the filesystem that holds `path` (or would hold it)."""
    path = _existing(Path(path))
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return path


def same_disk(a: str | Path, b: str | Path) -> bool:
    try:
        return os.stat(_existing(Path(a))).st_dev == os.stat(_existing(Path(b))).st_dev
    except OSError:
        return False


def disk_usage(path: str | Path) -> tuple[int, int] | None:
    """(size, bytes free to an unprivileged writer) of the filesystem holding `path`, or None."""
    try:
        st = os.statvfs(_existing(Path(path)))
    except OSError:
        return None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def disk_nearly_full(path: str | Path) -> bool:
    """Under 1 MiB (or 0.1% of the disk, up to 256 MiB) free: a write that failed there failed for space.
    Some writers (torch's zip writer) report a full disk without an errno; this is how to tell."""
    usage = disk_usage(path)
    if usage is None:
        return False
    size, free = usage
    return free < max(2**20, min(size // 1000, 256 * 2**20))


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def disk_full_message(path: str | Path, exc: OSError | None = None) -> str:
    """One line: "disk full: No space left on device writing <path> on the instance's <mount> (<size>, <free> free)"."""
    mount = mount_point(path)
    reason = os.strerror(exc.errno) if exc is not None and exc.errno else os.strerror(errno.ENOSPC)
    usage = disk_usage(mount)
    where = f" ({human_bytes(usage[0])}, {human_bytes(usage[1])} free)" if usage else ""
    return f"{DISK_FULL_PREFIX} {reason} writing {path} on the instance's {mount}{where}"


_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def newest_checkpoint_dir(output_dir: str | Path) -> Path | None:
    """The highest-step checkpoint-N folder under `output_dir` (the one a failed save was writing)."""
    try:
        found = [(int(m.group(1)), p) for p in Path(output_dir).iterdir() if (m := _CHECKPOINT.match(p.name))]
    except OSError:
        return None
    return max(found)[1] if found else None


def disk_full_cause(exc: BaseException, workdir: str | Path, output_dir: str | Path | None = None) -> str | None:
    """The disk-full line for `exc` when it failed because the disk holding `workdir` is full, else None.

    An ENOSPC anywhere in the chain counts when its file is on that disk (a full object store on another
    disk is the store's problem, reported as such); an error with no errno counts when that disk is
    (nearly) full now."""
    full = disk_full_error(exc)
    if full is not None:
        path = full.filename or full.filename2
        if path and not same_disk(path, workdir):
            return None
        return disk_full_message(path or newest_checkpoint_dir(output_dir or workdir) or workdir, full)
    if disk_nearly_full(workdir):
        where = newest_checkpoint_dir(output_dir) if output_dir is not None else None
        return disk_full_message(where or workdir)
    return None
