"""`python -m launchpad.train --spec /abs/path/job.json`: the trainer process on an instance.

Exit codes: 0 trained to the last step (status phase "done", finished true); 1 training failed
(status phase "failed", `error` one line); 2 bad input (spec, recipe, data) or the [train] extra missing;
28 (DISK_FULL_EXIT) the instance's disk is full: `error` says where, when there was room to write it.
The provider redirects stdout/stderr to train.log; nothing here prints environment values. On a full
disk train.log cannot take more either: every report is best effort, so the exit code still says why.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import traceback
from typing import Any

TRAIN_EXTRA = ("torch", "transformers", "peft", "trl", "accelerate", "datasets", "tokenizers")


def missing_train_extra() -> list[str]:
    return [m for m in TRAIN_EXTRA if importlib.util.find_spec(m) is None]


def _say(msg: str) -> None:
    """print_error, unless the log's disk is full: then the exit code and status carry the message."""
    from .trainer import print_error

    try:
        print_error(msg)
    except OSError:
        pass


def _print_traceback() -> None:
    try:
        traceback.print_exc()
        sys.stderr.flush()
    except OSError:
        pass


def _quiet_std_streams() -> None:
    """Flush stdout/stderr now; if the disk under them is full, drop what they hold so that the
    interpreter's exit does not fail on it (it would print another traceback and exit 120)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 (lives until exit)


def skip_unused_integrations(spec: Any) -> list[str]:
    """Mark DeepSpeed and W&B absent (``sys.modules[name] = None``: Python's own "not importable" entry,
    so every availability check says no, as on a machine without them) when this job uses neither.
    Installed, they are imported eagerly by code the job does run (accelerate imports deepspeed, and
    with it mlflow; trl imports wandb): ~1.4 s of every trainer start on 2 CPU cores, for nothing.
    Called before anything imports them; returns the names it marked."""
    uses = {"deepspeed": spec.uses_deepspeed,
            "wandb": bool(getattr(spec.recipe, "wandb_project", None))}
    skipped = [name for name, used in uses.items() if not used and name not in sys.modules]
    for name in skipped:
        sys.modules[name] = None  # type: ignore[assignment]
    return skipped


def _sigterm(signum, frame):  # stop/preemption: unwind so status.json says why we stopped
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m launchpad.train", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="absolute path of the job spec JSON")
    parser.add_argument("--local_rank", "--local-rank", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    missing = missing_train_extra()
    if missing:
        print(f"error: training needs the [train] extra (missing: {', '.join(missing)}): pip install 'launchpad[train]'",
              file=sys.stderr)
        return 2

    from ..errors import LaunchpadError
    from .distributed import status_writer
    from .spec import TrainJob
    from .status import DISK_FULL_EXIT, disk_full_cause
    from .trainer import first_line, print_error, run

    try:
        spec = TrainJob.load(args.spec)
    except LaunchpadError as e:
        print_error(str(e))
        return e.exit_code
    skip_unused_integrations(spec)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # forked dataloaders would warn and deadlock-guard
    status = status_writer(spec.status_path, spec.job_id).start()  # the node's local rank 0 writes it
    signal.signal(signal.SIGTERM, _sigterm)
    code = 0
    try:
        final_step = run(spec, status)
        status.update(phase="done", finished=True, error=None, step=final_step)
    except LaunchpadError as e:
        code = e.exit_code
        status.update(phase="failed", error=first_line(e))
        _say(str(e))
    except (SystemExit, KeyboardInterrupt) as e:
        code = e.code if isinstance(e, SystemExit) and isinstance(e.code, int) and e.code else 130
        status.update(phase="failed", error=f"interrupted (exit {code})")
        _say(f"interrupted (exit {code})")
    except Exception as e:  # anything else is a bug or an environment problem: keep the traceback in the log
        full = disk_full_cause(e, spec.workdir, spec.output_dir)
        if full:  # one line, not a traceback the full disk cannot take anyway
            code = DISK_FULL_EXIT
            status.update(phase="failed", error=f"{full}; the trainer's error: {first_line(e)}")
            _say(full)
        else:
            code = 1
            _print_traceback()
            status.update(phase="failed", error=first_line(e))
            _say(first_line(e))
    finally:
        status.stop()
    if status.write_error is not None and code not in (0, DISK_FULL_EXIT):
        _say(f"could not write {status.path}: {status.write_error.strerror}")
    _quiet_std_streams()
    return code


if __name__ == "__main__":
    from ..fast_exit import exit_now

    exit_now(main())
