"""`python -m launchpad.train --spec /abs/path/job.json`: the trainer process on an instance.

Exit codes: 0 trained to the last step (status phase "done", finished true); 1 training failed
(status phase "failed", `error` one line); 2 bad input (spec, recipe, data) or the [train] extra missing.
The provider redirects stdout/stderr to train.log; nothing here prints environment values.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import sys
import traceback

TRAIN_EXTRA = ("torch", "transformers", "peft", "trl", "accelerate", "datasets", "tokenizers")


def missing_train_extra() -> list[str]:
    return [m for m in TRAIN_EXTRA if importlib.util.find_spec(m) is None]


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
    from .trainer import first_line, print_error, run

    try:
        spec = TrainJob.load(args.spec)
    except LaunchpadError as e:
        print_error(str(e))
        return e.exit_code

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
        print_error(str(e))
    except (SystemExit, KeyboardInterrupt) as e:
        code = e.code if isinstance(e, SystemExit) and isinstance(e.code, int) and e.code else 130
        status.update(phase="failed", error=f"interrupted (exit {code})")
        print_error(f"interrupted (exit {code})")
    except Exception as e:  # anything else is a bug or an environment problem: keep the traceback in the log
        code = 1
        traceback.print_exc()
        status.update(phase="failed", error=first_line(e))
        print_error(first_line(e))
    finally:
        status.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
