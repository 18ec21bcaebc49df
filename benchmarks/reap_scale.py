"""How `launchpad reap --dry-run` scales with the number of tagged instances: 100, then 1,000, in 4 regions.

    python benchmarks/reap_scale.py                 # 100 then 1,000 instances, 3 passes each: ~2 min on 2 cores
    python benchmarks/reap_scale.py --sizes 100,300 --repeats 1

Starts moto's server (EC2 + S3) on 127.0.0.1 in its own process (benchmarks/_moto.py), makes the instances
with run_instances (MinCount = MaxCount = 2: two instances per job, tagged launchpad-job=<job>) spread
round-robin over us-east-1, us-west-2, eu-west-1 and ap-southeast-2. Half of the jobs are in a state DB
(a fresh LAUNCHPAD_HOME) with their store in moto's S3, and half of those have a heartbeat.json there;
the other half are orphans nobody knows (each of them costs the store reads that find nothing).

Times, per size, the real CLI (`launchpad reap --dry-run --json` in a fresh process: start-up, listing,
store reads, classification) and the same pass in this process (launchpad.reaper.Reaper.run), and prints
each figure with its growth as a ratio to the 100-instance figure measured in the same run.
The server is the ceiling: moto serves every describe page and every S3 GET from one Python process.
Goal: <= 10 s per pass at 1,000 instances.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")] + [str(REPO / "providers" / p) for p in ("local", "ssh", "aws")]

from _moto import MotoServer  # noqa: E402

REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "ap-southeast-2"]
STORE = "s3://reap-bench/checkpoints"
PER_JOB = 2


def make_instances(start_job: int, count: int, home: Path) -> None:
    """`count` more instances (count / PER_JOB jobs, numbered from `start_job`)."""
    import boto3

    from launchpad.jobspec import JobSpec
    from launchpad.models import JOB_TAG, JobState
    from launchpad.state import StateDB
    from launchpad.storage import open_store
    from launchpad.storage.jobfiles import write_heartbeat, write_job

    clients = {r: boto3.client("ec2", region_name=r) for r in REGIONS}
    db = StateDB(home / "state.db")
    store = open_store(STORE)
    for n in range(start_job, start_job + count // PER_JOB):
        job = f"bench-{n:05d}"
        region = REGIONS[n % len(REGIONS)]
        clients[region].run_instances(
            ImageId="ami-12c6146b", InstanceType="g5.xlarge", MinCount=PER_JOB, MaxCount=PER_JOB,
            TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": JOB_TAG, "Value": job}]}])
        if n % 2 == 0:  # known: in the state DB, its job.json in the store; every other one beats
            spec = JobSpec.from_json({"job_id": job, "recipe": {"name": "bench", "base_model": "x"},
                                      "checkpoint_uri": STORE})
            db.create_job(job, None, spec, "")
            db.set_state(job, JobState.TRAINING)
            write_job(store, job, {"spec": spec.to_json()})
            if n % 4 == 0:
                write_heartbeat(store, job, {"phase": "training", "trainer_running": True, "step": n})
    db.close()


def cli_pass(env: dict[str, str]) -> tuple[float, int, dict[str, int]]:
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "launchpad", "reap", "--dry-run", "--json"], env=env,
                       capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(f"reap failed ({r.returncode}): {r.stderr[-2000:]}")
    rows = json.loads(r.stdout)
    classes: dict[str, int] = {}
    for row in rows:
        classes[row["class"]] = classes.get(row["class"], 0) + 1
    return seconds, len(rows), classes


def inprocess_pass() -> float:
    from launchpad.plugins import configured_providers
    from launchpad.reaper import Reaper, ReapPolicy
    from launchpad.state import StateDB

    usable, _ = configured_providers()
    db = StateDB.open()
    try:
        report = Reaper(usable, db, ReapPolicy(dry_run=True)).run()
    finally:
        db.close()
        for p in usable.values():
            close = getattr(p, "close", None)
            if close:
                close()
    return report.seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000", help="instance counts, ascending (default 100,1000)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    server = MotoServer()
    home = Path(tempfile.mkdtemp(prefix="reap-bench-"))
    os.environ["LAUNCHPAD_HOME"] = str(home)
    import yaml

    (home / "config.yaml").write_text(yaml.safe_dump(
        {"providers": {"aws": {"regions": REGIONS, "checkpoint_uri": STORE, "live_prices": False}}}))
    paths = [str(REPO)] + [str(REPO / "providers" / p) for p in ("local", "ssh", "aws")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    try:
        import boto3

        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="reap-bench")
        made = 0
        results = []
        for size in sizes:
            t = time.perf_counter()
            make_instances(made // PER_JOB, size - made, home)
            made = size
            print(f"[{size} instances made in {time.perf_counter() - t:.1f}s]", flush=True)
            cli, inproc = [], []
            for _ in range(args.repeats):
                seconds, rows, classes = cli_pass(env)
                cli.append(seconds)
                inproc.append(inprocess_pass())
            if rows != size:
                sys.exit(f"expected {size} rows, reap listed {rows}")
            results.append((size, cli, inproc, classes))
        base_cli, base_in = statistics.median(results[0][1]), statistics.median(results[0][2])
        print(f"\nlaunchpad reap --dry-run on moto, {len(REGIONS)} regions, {PER_JOB} instances per job, "
              f"{args.repeats} passes each (best / median s; growth = median / median at {sizes[0]})")
        print(f"{'instances':>9}  {'CLI (fresh process)':>22}  {'growth':>7}  {'in-process pass':>18}  {'growth':>7}  classes")
        for size, cli, inproc, classes in results:
            mc, mi = statistics.median(cli), statistics.median(inproc)
            print(f"{size:>9}  {min(cli):>9.2f} / {mc:>9.2f}  {mc / base_cli:>6.2f}x  {min(inproc):>7.2f} / {mi:>7.2f}  "
                  f"{mi / base_in:>6.2f}x  {json.dumps(classes, sort_keys=True)}")
        worst = statistics.median(results[-1][1])
        print(f"\ngoal <= 10 s per pass at {sizes[-1]}: {'met' if worst <= 10 else 'MISSED'} ({worst:.2f} s, CLI median)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
