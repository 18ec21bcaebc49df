"""A job's processes as a tree, so stopping it reaches every one of them.

Signalling the agent's process group is not enough: torchrun starts each worker in a session of its
own (torch.distributed.elastic), so a SIGKILL to the group, or to torchrun, leaves the workers running,
holding the GPU and writing into a work directory that teardown has just deleted. Workers are found
through their parents while those live, and remembered by (pid, start time) after they are orphaned.
Linux /proc only, stdlib only (it runs on the instance from the agent's wheel).
"""

from __future__ import annotations

import os
import signal
import time

from . import process_start_time, stat_fields

Tracked = dict[int, str]  # pid -> the kernel's start time of that very process


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return kids
    for name in names:
        if name.isdigit() and (fields := stat_fields(int(name))) is not None:
            kids.setdefault(int(fields[1]), []).append(int(name))
    return kids


def alive(tracked: Tracked) -> Tracked:
    """The tracked processes that still run (zombies and reused pids do not count)."""
    return {pid: start for pid, start in tracked.items() if process_start_time(pid) == start}


def grow(tracked: Tracked) -> Tracked:
    """`tracked` plus every live descendant of its live members (call it again to catch new children)."""
    out = dict(tracked)
    kids = _children()
    todo = list(alive(tracked))
    while todo:
        for child in kids.get(todo.pop(), ()):
            start = process_start_time(child)
            if start is not None and out.get(child) != start:
                out[child] = start
                todo.append(child)
    return out


def track(*pids: int) -> Tracked:
    """The live processes among `pids` and all their descendants."""
    return grow({pid: start for pid in pids if (start := process_start_time(pid)) is not None})


def signal_each(tracked: Tracked, sig: int) -> None:
    for pid in alive(tracked):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def wait_gone(tracked: Tracked, timeout: float) -> Tracked:
    """Wait up to `timeout` s for the tree (children it starts meanwhile included) to end; what still runs."""
    deadline = time.monotonic() + timeout
    while True:
        tracked = grow(tracked)
        left = alive(tracked)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def kill(tracked: Tracked, settle: float = 5.0) -> Tracked:
    """SIGKILL every process of the tree (and any child one starts meanwhile); wait up to `settle` s
    for the kernel to end them. Returns what still runs."""
    deadline = time.monotonic() + settle
    while left := alive(tracked := grow(tracked)):
        signal_each(left, signal.SIGKILL)
        if time.monotonic() >= deadline:
            return alive(tracked)
        time.sleep(0.05)
    return {}
