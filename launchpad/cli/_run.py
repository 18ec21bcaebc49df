"""Running lifecycle operations with live feedback: phase lines and a training progress bar."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

from ..plugins import configured_providers, provider_for
from ._common import console, err_console, esc


def open_lifecycle(quiet: bool, only: str | None = None):
    from ..lifecycle import Lifecycle
    from ..state import StateDB

    usable, unavailable = configured_providers(only)
    reporter = _QuietReporter() if quiet else RichReporter()
    db = StateDB.open()
    print_warnings(db)
    return Lifecycle(db, usable, unavailable, reporter, provider_factory=provider_for)


def print_warnings(db) -> None:
    """What the state file has to say (truncated, damaged rows), once each."""
    for warning in db.warnings:
        err_console().print(f"[yellow]![/] {esc(warning)}", soft_wrap=True)
    db.warnings.clear()


class _QuietReporter:
    def info(self, message: str) -> None:
        pass

    def warn(self, message: str) -> None:
        err_console().print(f"[yellow]![/] {esc(message)}", soft_wrap=True)

    def progress(self, job_id, progress) -> None:
        pass

    def transfer(self, what: str, done: int, total: int) -> None:
        pass


class RichReporter:
    """Phase lines, then one progress bar for training (step/total, loss, tokens/s)."""

    def __init__(self) -> None:
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._prewarm: Progress | None = None
        self._prewarm_task: TaskID | None = None
        self._upload: Progress | None = None
        self._upload_tasks: dict[str, TaskID] = {}
        self._upload_lock = threading.Lock()
        self._last_ckpt: int | None = None
        self._warned = False

    def info(self, message: str) -> None:
        console().print(f"[bold cyan]›[/] {esc(message)}", soft_wrap=True)

    def warn(self, message: str) -> None:
        console().print(f"[yellow]![/] {esc(message)}", soft_wrap=True)

    def progress(self, job_id: str, p) -> None:
        if p.warning and not self._warned:
            self._warned = True
            self.warn(p.warning)
        if p.phase == "prewarm" and p.prewarm_total_bytes:
            self._show_prewarm(p)
            return
        if self._prewarm is not None and p.phase != "prewarm":
            self._prewarm.stop()
            self._prewarm = None
        if p.last_checkpoint_step is not None and p.last_checkpoint_step != self._last_ckpt:
            if self._last_ckpt is not None or p.resumed_from_step != p.last_checkpoint_step:
                msg = f"checkpoint-{p.last_checkpoint_step} is complete in the store"
                (self._progress.console if self._progress else console()).print(f"[green]✓[/] {msg}")
            self._last_ckpt = p.last_checkpoint_step
        if p.total_steps is None and p.step == 0:
            return
        if self._progress is None or self._task is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[speed]}"), TimeRemainingColumn(),
                console=console(), transient=False,
            )
            self._progress.start()
            self._task = self._progress.add_task("training", total=p.total_steps, loss="-", speed="")
        loss = f"{p.loss:.3f}" if p.loss is not None else "-"
        speed = f"{p.tokens_per_s:,.0f} tok/s" if p.tokens_per_s else ""
        self._progress.update(self._task, completed=p.step, total=p.total_steps, loss=loss, speed=speed,
                              description=p.phase if p.phase not in ("training", "done") else "training")

    def transfer(self, what: str, done: int, total: int) -> None:
        """Upload progress while syncing to a VM (wheel, job files, local datasets). Called from one
        thread per node of a multi-node job, hence the lock."""
        with self._upload_lock:
            self._transfer(what, done, total)

    def _transfer(self, what: str, done: int, total: int) -> None:
        upload = self._upload
        if upload is None:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            upload = self._upload = Progress(TextColumn("[bold]upload {task.description}"), BarColumn(),
                                             DownloadColumn(), TransferSpeedColumn(), console=console(), transient=True)
            upload.start()
            self._upload_tasks = {}
        if what not in self._upload_tasks:
            self._upload_tasks[what] = upload.add_task(what, total=total)
        upload.update(self._upload_tasks[what], completed=done, total=total)
        if all(t.finished for t in upload.tasks):
            upload.stop()
            self._upload = None

    def _show_prewarm(self, p) -> None:
        if self._prewarm is None or self._prewarm_task is None:
            from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

            self._prewarm = Progress(TextColumn("[bold]pre-warm"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                     console=console())
            self._prewarm.start()
            self._prewarm_task = self._prewarm.add_task("pre-warm", total=p.prewarm_total_bytes)
        self._prewarm.update(self._prewarm_task, completed=p.prewarm_done_bytes, total=p.prewarm_total_bytes)

    def close(self) -> None:
        if self._prewarm is not None:
            self._prewarm.stop()
            self._prewarm = None
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def run_reported(lc, quiet: bool, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    finally:
        close = getattr(lc.reporter, "close", None)
        if close:
            close()
