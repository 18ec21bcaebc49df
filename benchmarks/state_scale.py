"""`launchpad status` against the size of the state: 100, 1,000 and 10,000 jobs (each finished job with 2
instances and 3 events; every 100th job live), on SQLite and on PostgreSQL (a throwaway server started
here with launchpad.testing_postgres, like the tests).

    python benchmarks/state_scale.py [--sizes 100,1000,10000] [--repeat 5] [--no-postgres]

Each figure is the median of `--repeat` runs of the real command in this process (click's CliRunner: the
interpreter's start-up and imports are paid once, before timing, and excluded; `subprocess` adds one run
of `python -m launchpad status` in a fresh process, start-up included). Growth is the ratio to the
100-job figure of the same backend measured in this run. Goal (issue 13): <= 0.5 s at 10,000 jobs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def timed(args: list[str], repeat: int) -> float:
    from click.testing import CliRunner

    from launchpad.cli import cli

    def once() -> float:
        start = time.perf_counter()
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
        elapsed = time.perf_counter() - start
        if result.exit_code != 0:
            raise SystemExit(f"launchpad {' '.join(args)} exited {result.exit_code}: {result.output[-500:]}")
        return elapsed

    once()  # warm: imports and plugin discovery happen once per process
    return statistics.median(once() for _ in range(repeat))


def in_subprocess(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "launchpad", *args], check=True, capture_output=True, cwd=REPO)
    return time.perf_counter() - start


def measure(backend: str, url: str, size: int, repeat: int) -> dict[str, float]:
    from launchpad.state import StateDB
    from launchpad.testing_state import fill_state

    os.environ["LAUNCHPAD_STATE_URL"] = url
    db = StateDB.open()
    start = time.perf_counter()
    fill_state(db, size, instances=2, events=3)
    db.close()
    print(f"  {backend} {size:>6} jobs: filled in {time.perf_counter() - start:.1f} s", flush=True)
    return {"status": timed(["status"], repeat), "status --json": timed(["status", "--json"], repeat),
            "status --all --json": timed(["status", "--all", "--json"], max(1, repeat // 2)),
            "subprocess status": in_subprocess(["status"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,10000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-postgres", action="store_true")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    home = Path(tempfile.mkdtemp(prefix="lp-bench-"))
    os.environ.update(LAUNCHPAD_HOME=str(home), COLUMNS="120", AWS_EC2_METADATA_DISABLED="true")

    results: dict[tuple[str, int], dict[str, float]] = {}
    for size in sizes:
        results["sqlite", size] = measure("sqlite", f"sqlite:///{home / f'state-{size}.db'}", size, args.repeat)
    if not args.no_postgres:
        from launchpad.testing_postgres import PostgresServer

        with PostgresServer() as pg:
            for size in sizes:
                results["postgresql", size] = measure("postgresql", pg.create_database(), size, args.repeat)

    print(f"\nmedian of {args.repeat} in-process runs (CliRunner), seconds; growth = / the {sizes[0]}-job figure")
    print(f"{'backend':<11} {'jobs':>6}  {'what':<20} {'seconds':>8} {'growth':>7}")
    for (backend, size), figures in results.items():
        for what, seconds in figures.items():
            base = results[backend, sizes[0]][what]
            print(f"{backend:<11} {size:>6}  {what:<20} {seconds:>8.3f} {seconds / base:>6.1f}x")


if __name__ == "__main__":
    main()
