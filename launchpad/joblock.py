"""Per-job locks shared by every launchpad process on this machine (`up`, `resume`, `down`, `status`).

Two locks per job, both `flock`s on files under ``<data dir>/locks/`` (released by the kernel when a
process dies, so a crash never leaves a job locked):

- the **attempt** lock: held by whoever drives the job (`up`/`resume`, from provisioning until the
  trainer ends, or until TRAINING with `--detach`). Taken without waiting: a second `resume` of the
  same job is refused instead of starting a second instance next to the first.
- the **step** lock: held briefly around each step that starts something (recording a provisioned
  instance, starting the trainer, finishing) and around `down`. So a `down` either happens before a
  step (and the step sees it and stops) or after it (and tears down what the step started), never in
  the middle. Teardown always wins.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import JobBusy


class JobLocks:
    def __init__(self, root: Path):
        self.root = Path(root)
        self._held: dict[str, tuple[int, int]] = {}  # attempt locks this process holds: job -> (fd, depth)
        self._mutex = threading.Lock()

    def _open(self, job_id: str, kind: str) -> int:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        return os.open(self.root / f"{job_id}.{kind}", os.O_RDWR | os.O_CREAT, 0o600)

    @contextmanager
    def attempt(self, job_id: str) -> Iterator[None]:
        """One live attempt per job. Re-entrant within this process (an automatic resume inside `up`)."""
        with self._mutex:
            if job_id in self._held:
                fd, depth = self._held[job_id]
                self._held[job_id] = (fd, depth + 1)
                nested = True
            else:
                nested = False
        if not nested:
            fd = self._open(job_id, "attempt")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise JobBusy(f"{job_id} is being run by another launchpad process right now",
                              hint=f"follow it with `launchpad logs {job_id} -f`, or stop it with `launchpad down {job_id}`",
                              ) from None
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            with self._mutex:
                self._held[job_id] = (fd, 1)
        try:
            yield
        finally:
            with self._mutex:
                fd, depth = self._held[job_id]
                if depth > 1:
                    self._held[job_id] = (fd, depth - 1)
                else:
                    del self._held[job_id]
                    os.close(fd)  # releases the flock

    def attempt_held(self, job_id: str) -> bool:
        """Whether some process (this one included) holds the job's attempt lock right now: a job whose
        state says it runs but whose lock is free was abandoned (its client was killed). The check takes
        the lock for an instant: an `attempt` at that very instant is refused (JobBusy) and may be retried."""
        with self._mutex:
            if job_id in self._held:
                return True
        try:
            fd = os.open(self.root / f"{job_id}.attempt", os.O_RDWR)
        except FileNotFoundError:
            return False  # never attempted on this machine
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # releases the flock if we got it
        return False

    @contextmanager
    def step(self, job_id: str, timeout: float = 900) -> Iterator[None]:
        """Exclusive with every other step of this job in any process. Waits (bounded) for it."""
        fd = self._open(job_id, "step")
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise JobBusy(f"{job_id}: another launchpad process held the job's lock for {timeout:.0f} s",
                                      hint="try again; if it persists, that process is stuck: stop it") from None
                    time.sleep(0.1)
            yield
        finally:
            os.close(fd)
