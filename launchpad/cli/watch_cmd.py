"""`launchpad watch`: managed recovery for detached jobs. A long-running foreground command (run it as a
service, or `--once` from cron): each pass refreshes every job started with `--recover` that is TRAINING
(or INTERRUPTED by a lost instance with restarts left) and recovers it when its instance is gone
(launchpad.recovery). A job another launchpad process runs (a following `up`) is left to that process.
"""

from __future__ import annotations

import json
import sys
import time

import click

from ._common import console, esc, json_option


@click.command("watch")
@click.option("--once", is_flag=True, help="One pass over the jobs, then exit (for tests and cron).")
@click.option("--interval", type=float, default=15.0, show_default=True, metavar="SECONDS",
              help="Seconds between passes.")
@json_option
def watch(once: bool, interval: float, as_json: bool) -> None:
    """Watch jobs started with --recover and recover them when their instance is preempted or vanishes."""
    from ..errors import BadInput
    from ._run import open_lifecycle

    if interval <= 0:
        raise BadInput(f"--interval {interval:g}: must be more than 0 seconds; e.g. --interval 15")
    lc = open_lifecycle(True)  # warnings go to stderr; stdout is one line per action
    if not as_json and not once:
        console().print(f"watching jobs with --recover every {interval:g} s (Ctrl-C to stop)")
    while True:
        for action in lc.watch_pass():
            if as_json:
                sys.stdout.write(json.dumps(action, default=str) + "\n")
                sys.stdout.flush()
            else:
                detail = f": {action['detail']}" if action.get("detail") else ""
                console().print(f"{esc(action['job'])} {esc(action['action'])}{esc(detail)} -> {esc(action['state'])}",
                                soft_wrap=True)
        if once:
            return
        time.sleep(interval)
