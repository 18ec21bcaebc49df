"""Exit a process that has loaded torch (the trainer, the environment check, the all-reduce probe)
without the interpreter's final teardown."""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    """Exit as the interpreter would (non-daemon threads joined, then the exit handlers: logging,
    TensorBoard, W&B; stdout and stderr flushed), minus its teardown of every module object: with torch,
    transformers and datasets loaded that alone costs ~1.8 s of CPU (2 cores) after the work is done and
    its files are written; 0.6 s after torch alone."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a full disk under the log: the exit code still says why
            pass
    os._exit(code)
