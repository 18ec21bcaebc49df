"""Fault injection: `launchpad up` on moto's EC2 + S3 and a loopback sshd, SIGKILLed at a random point of
the lifecycle, then `launchpad reap`, then `launchpad resume` where the job had started training.

    python benchmarks/faults.py                 # 100 runs, the issue's figure (~45 min on 2 cores)
    python benchmarks/faults.py --runs 12       # two rounds of the six kill points (~6 min)

Kill points, in turn (the delay after the point is drawn at random, seeded):
    provision      the client, 0-0.6 s after it asked EC2 for the instance (inside RunInstances, or between
                   its return and the state recording the instance)
    sync           the client, 0-4 s into syncing (wheel, job files, environment set-up, agent start)
    training       the client, 0-6 s after the trainer started (the agent trains on without it)
    upload         the client AND the instance's agent + trainer (a crashed machine that comes back), the
                   moment the trainer has handed a checkpoint over and the agent is uploading it: that
                   checkpoint is only on the machine's disk (the resume uploads it before the teardown)
    teardown       the client, as it begins tearing the finished job's instance down (before the terminate
                   call) or right after the call returned (before the job is recorded SUCCEEDED), at random;
                   moto terminates at once, so a delay would land after the teardown
    detached       `up --detach` returns; the client never comes back (the agent finishes, uploads, stops)

Every fault is real: a real SIGKILL (a launchpad plugin in the client's process, launchpad.testing_faults;
`kill -9` of the agent's and trainer's processes on the "instance"). What EC2 does is done too: when an
instance is terminated or stopped, everything running on it dies (the harness kills the processes under
its work directory, since one loopback sshd plays every instance).

Figures (each against its goal): instances left running after `reap` (goal 0, counting jobs that had not
reached training: nothing drives them any more); instances left at the end (goal 0); resumes from an
incomplete checkpoint (goal 0: the step the trainer resumed from must have had a verified manifest);
steps of work lost per kill (goal <= checkpoint.every_steps); seconds from the kill to training again
(reap + resume --detach), as a ratio of one clean `up`'s time to its first training step measured in
the same run (the baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

POINTS = ("provision", "sync", "training", "upload", "teardown", "detached")
KILL_AT = {"provision": ("provision:attempt", 0.6), "sync": ("state:SYNCING", 4.0),
           "training": ("state:TRAINING", 6.0), "teardown": ("teardown:start|teardown:done", 0.0)}
FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")
LIVE = ["pending", "running", "stopping", "stopped"]
RUNNING = ["pending", "running", "stopping"]  # billing compute; a stopped instance bills its disk only


@dataclass
class Run:
    point: str
    job: str = ""
    killed: bool = False
    reached_training: bool = False
    step_at_kill: int | None = None
    left_after_reap: int = 0
    left_at_end: int = 0
    resumed_from: int | None = None
    resumed_incomplete: bool = False
    steps_lost: int | None = None
    kill_to_training_s: float | None = None
    final_state: str = ""
    final_step: int = 0
    stopped_by_agent: bool = False  # `detached`: the agent stopped its own machine (autostop via the API)
    other_reap: list[str] = field(default_factory=list)  # `detached`: what a reap from another machine saw
    notes: list[str] = field(default_factory=list)


class Cloud:
    """moto (in this process: the harness terminates instances the way EC2 does) + one loopback sshd."""

    def __init__(self, base: Path):
        from moto.server import ThreadedMotoServer

        from launchpad.testing_ssh import LoopbackSshd

        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.moto.start()
        host, port = self.moto.get_host_and_port()
        creds = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        os.environ.update(AWS_ENDPOINT_URL=f"http://{host}:{port}", **creds)
        self.sshd = LoopbackSshd(base / "sshd", env={"AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"],
                                                      "HF_HUB_OFFLINE": "1", **creds}).start()
        self.root = base / "instance-root"
        self._stop = threading.Event()
        self._reaper = threading.Thread(target=self._what_ec2_does, daemon=True)
        self._reaper.start()

    def ec2(self):
        import boto3

        return boto3.client("ec2", region_name="us-east-1")

    def instances(self, states: list[str], job: str | None = None) -> list[dict]:
        filters = [{"Name": "instance-state-name", "Values": states}]
        filters.append({"Name": "tag:launchpad-job", "Values": [job]} if job
                       else {"Name": "tag-key", "Values": ["launchpad-job"]})
        res = self.ec2().describe_instances(Filters=filters)
        return [i for r in res["Reservations"] for i in r["Instances"]]

    def kill_on(self, instance_id: str) -> int:
        from launchpad.testing_faults import processes_naming

        n = 0
        for pid in processes_naming(self.root / "jobs" / instance_id):
            try:
                os.kill(pid, signal.SIGKILL)
                n += 1
            except ProcessLookupError:
                pass
        return n

    def _what_ec2_does(self) -> None:
        """A stopped or terminated instance runs nothing any more."""
        while not self._stop.wait(0.5):
            try:
                for inst in self.instances(["stopping", "stopped", "shutting-down", "terminated"]):
                    self.kill_on(inst["InstanceId"])
            except Exception:  # noqa: BLE001 - moto busy: the next round sees it
                pass

    def close(self) -> None:
        self._stop.set()
        for inst in self.instances(LIVE + ["shutting-down", "terminated"]):
            self.kill_on(inst["InstanceId"])
        self.sshd.stop()
        self.moto.stop()


def write_home(cloud: Cloud, home: Path, work: Path) -> None:
    import getpass

    import yaml

    home.mkdir(parents=True, exist_ok=True)
    cfg = cloud.sshd.config()
    ssh_config = work / "ssh_config"
    ssh_config.write_text(f"Host *\n  HostName 127.0.0.1\n  Port {cfg['port']}\n  User {getpass.getuser()}\n")
    settings = {"regions": ["us-east-1"], "ssh_cidr": "127.0.0.1/32", "ami_name": "Deep Learning AMI Ubuntu Linux*",
                "key": cfg["key"], "ssh_config": str(ssh_config), "python": sys.executable, "root": str(cloud.root),
                "live_prices": False, "connect_timeout": 20, "boot_timeout": 30, "autostop_via": "api"}
    (home / "config.yaml").write_text(yaml.safe_dump({"providers": {"aws": settings}}))


def write_recipe(work: Path, steps: int, every: int, idle_minutes: float = 1, name: str = "faults") -> Path:
    import yaml

    recipe = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    recipe["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    recipe.update(name="faults", max_steps=steps)
    recipe["checkpoint"] = {"every_steps": every, "keep": 3}
    recipe["resources"] = {"regions": ["us-east-1"]}
    recipe["autostop"] = {"idle_minutes": idle_minutes, "action": "stop"}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


class Harness:
    def __init__(self, cloud: Cloud, base: Path, recipe: Path, every: int, steps: int):
        self.cloud, self.base, self.recipe, self.every, self.steps = cloud, base, recipe, every, steps
        self.home = base / "home"
        # the detached run waits for the agent's own autostop: a short idle window, same job otherwise
        self.detached_recipe = write_recipe(recipe.parent, steps, every, idle_minutes=0.15, name="faults-detached")
        self.env = {**os.environ, "LAUNCHPAD_HOME": str(self.home), "HF_HUB_OFFLINE": "1", "COLUMNS": "200",
                    "LAUNCHPAD_STORE_HEARTBEAT_SECONDS": "2"}

    def cli(self, *args: str, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "launchpad", *args], capture_output=True, text=True,
                              env=env or self.env, cwd=REPO, timeout=timeout)

    def newest_job(self) -> str:
        from launchpad.state import StateDB

        db = StateDB(self.home / "state.db")
        try:
            jobs = db.jobs()
            return jobs[-1].id if jobs else ""
        finally:
            db.close()

    def job_facts(self, job: str) -> dict[str, Any]:
        from launchpad.state import StateDB

        db = StateDB(self.home / "state.db")
        try:
            rec = db.job(job)
            kinds = [e["kind"] for e in db.events(job)]
            return {"state": rec.state.value, "step": rec.step, "trained": "state:TRAINING" in kinds}
        finally:
            db.close()

    def events(self, job: str) -> list[dict[str, Any]]:
        from launchpad.state import StateDB

        db = StateDB(self.home / "state.db")
        try:
            return list(db.events(job))
        finally:
            db.close()

    def trainer_status(self, job: str, newer_than: float = 0.0) -> dict[str, Any]:
        """The newest status of the job's trainer on the "instance" (the trainer's own file, which the agent
        merges into status.json every 2 s)."""
        found = []
        for inst in self.cloud.instances(LIVE + ["shutting-down", "terminated"], job):
            path = self.cloud.root / "jobs" / inst["InstanceId"] / "trainer-status.json"
            try:
                if path.stat().st_mtime > newer_than:
                    found.append((path.stat().st_mtime, json.loads(path.read_text())))
            except (OSError, ValueError):
                pass
        return max(found, key=lambda f: f[0])[1] if found else {}

    def complete_steps(self, job: str) -> set[int]:
        from launchpad.storage import open_store
        from launchpad.storage.checkpoints import list_checkpoints

        store = open_store("s3://launchpad-123456789012-us-east-1/checkpoints")
        return {r.step for r in list_checkpoints(store, job)}

    def one(self, i: int, point: str, rng: random.Random) -> Run:
        run = Run(point)
        log = self.base / "kills.jsonl"
        env = dict(self.env)
        if point in KILL_AT:
            from launchpad.testing_faults import install_kill_hook

            at, span = KILL_AT[point]
            at = rng.choice(at.split("|"))
            env.update(install_kill_hook(self.base / "site", at, rng.uniform(0, span), log))
        if point == "detached":
            args = ["up", str(self.detached_recipe), "--provider", "aws", "--json", "--detach"]
        else:
            args = ["up", str(self.recipe), "--provider", "aws", "--json"]
        up = subprocess.Popen([sys.executable, "-m", "launchpad", *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
        kill_ts = None
        if point == "upload":
            kill_ts = self._crash_during_upload(up, run)
        out, err = up.communicate(timeout=900)
        run.job = self.newest_job()
        if up.returncode == -signal.SIGKILL:
            run.killed = True
            if kill_ts is None:
                kills = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
                kill_ts = kills[-1]["ts"] if kills else time.time()
        elif point != "detached" and up.returncode != 0:
            run.notes.append(f"up exited {up.returncode}: {err.strip()[-300:]}")
        kill_ts = kill_ts or time.time()
        facts = self.job_facts(run.job)
        run.reached_training = facts["trained"]
        if run.step_at_kill is None:
            run.step_at_kill = self.trainer_status(run.job).get("step")
        reap = self.cli("reap", "--json")
        if reap.returncode not in (0, 1):
            run.notes.append(f"reap exited {reap.returncode}: {reap.stderr.strip()[-300:]}")
        if not run.reached_training:
            run.left_after_reap = len(self.cloud.instances(RUNNING, run.job))
        if point == "detached":  # the client never comes back: the agent finishes on its own
            self._wait_for_agent(run)
        elif run.reached_training and not self.job_facts(run.job)["state"] == "SUCCEEDED":
            res = self.cli("resume", run.job, "--detach", "--json")
            run.kill_to_training_s = time.time() - kill_ts
            if self.job_facts(run.job)["state"] in FINISHED:  # it only had its teardown left: no training again
                run.kill_to_training_s = None
            if res.returncode != 0:
                run.notes.append(f"resume --detach exited {res.returncode}: {res.stderr.strip()[-300:]}")
            status, deadline = {}, time.monotonic() + 120
            while time.monotonic() < deadline:  # the new trainer has loaded and says where it resumed from
                status = self.trainer_status(run.job, newer_than=kill_ts)  # not the killed trainer's
                if status.get("resumed_from") or (status.get("step") or 0) > 0 or status.get("phase") == "done":
                    break
                if self.job_facts(run.job)["state"] in FINISHED:  # nothing to train again (killed in teardown)
                    break
                time.sleep(0.2)
            resumed = (status.get("resumed_from") or {}).get("step")
            run.resumed_from = resumed
            # complete = its manifest verifies against the objects present (read now: the trainer has just
            # resumed from it; one the resume salvaged from the crashed machine's disk counts once uploaded)
            run.resumed_incomplete = resumed is not None and resumed not in self.complete_steps(run.job)
            salvaged = [e["data"].get("step") for e in self.events(run.job) if e["kind"] == "salvaged"]
            if salvaged:
                run.notes.append(f"uploaded checkpoint-{salvaged[-1]} from the crashed machine's disk first")
            if point == "upload" and run.step_at_kill is not None:
                run.steps_lost = max(0, run.step_at_kill - (resumed or 0))
                run.notes.append(f"crashed at step {run.step_at_kill}, resumed from {resumed}")
            else:
                run.steps_lost = 0 if status.get("step", 0) >= (run.step_at_kill or 0) else None
            fin = self.cli("resume", run.job, "--json")
            if fin.returncode != 0:
                run.notes.append(f"resume exited {fin.returncode}: {fin.stderr.strip()[-300:]}")
        if point != "detached":
            self.cli("reap", "--json")  # a second pass: what the first could not yet tell (e.g. a finished job)
        end: dict[str, Any] = self.job_facts(run.job) if run.job else {"state": "", "step": 0}
        run.final_state, run.final_step = end["state"], end["step"]
        if point == "detached":  # this client never looked again: the store says how far the agent got
            run.final_step = max(self.complete_steps(run.job) or {0})
        run.left_at_end = len(self.cloud.instances(RUNNING, run.job)) if run.job else 0
        stopped = len(self.cloud.instances(["stopped"], run.job)) if run.job else 0
        if stopped:
            run.notes.append(f"{stopped} instance(s) stopped by autostop (disk only)")
        return run

    def _crash_during_upload(self, up: subprocess.Popen, run: Run) -> float | None:
        """Wait until the agent uploads a checkpoint past the first one (the trainer handed it over: it is in
        the upload queue), then kill the client and everything on the instance at once."""
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and up.poll() is None:
            for inst in self.cloud.instances(["running"]):
                work = self.cloud.root / "jobs" / inst["InstanceId"]
                queue = work / "upload-queue"
                steps = [int(p.name.split("-")[1]) for p in queue.glob("checkpoint-*") if p.name.split("-")[1].isdigit()]
                if steps and max(steps) >= 2 * self.every:
                    run.step_at_kill = json.loads((work / "trainer-status.json").read_text()).get("step")
                    up.kill()
                    self.cloud.kill_on(inst["InstanceId"])
                    return time.time()
            time.sleep(0.05)
        return None

    def _wait_for_agent(self, run: Run, timeout: float = 600) -> None:
        """`up --detach` and gone: the agent alone must finish, upload and stop its machine; a reap from
        another machine (a fresh LAUNCHPAD_HOME: no state, same store and credentials) sees the truth."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.cloud.instances(["pending", "running"], run.job):
            time.sleep(1)
        other = {**self.env, "LAUNCHPAD_HOME": str(self.base / "other-machine")}
        (self.base / "other-machine").mkdir(exist_ok=True)
        (self.base / "other-machine" / "config.yaml").write_text((self.home / "config.yaml").read_text())
        seen = self.cli("reap", "--json", env=other)
        try:
            rows = [r for r in json.loads(seen.stdout or "[]") if r.get("job") == run.job]
        except ValueError:
            rows = []
        run.other_reap = [f"{r.get('class')}: {r.get('reason')} -> {r.get('action')}" for r in rows]
        run.notes.append("other machine's reap: " + "; ".join(run.other_reap))
        run.stopped_by_agent = bool(self.cloud.instances(["stopped"], run.job))
        run.steps_lost = 0


def baseline(h: Harness) -> float:
    t0 = time.monotonic()
    proc = h.cli("up", str(h.recipe), "--provider", "aws", "--detach", "--json")
    took = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"the clean baseline `up` failed: {proc.stderr[-2000:]}")
    h.cli("resume", json.loads(proc.stdout)["id"], "--json")
    return took


def report(runs: list[Run], base_s: float, every: int, steps: int) -> None:
    print(f"\nbaseline: one clean `up --detach` to training: {base_s:.1f} s\n")
    print(f"{'point':<10} {'runs':>4} {'killed':>6} {'left/reap':>9} {'left/end':>8} {'bad resume':>10} "
          f"{'lost max':>8} {'kill->train s (x base)':>24} {'succeeded':>9}")
    for point in POINTS:
        rs = [r for r in runs if r.point == point]
        if not rs:
            continue
        lost = [r.steps_lost for r in rs if r.steps_lost is not None]
        k2t = [r.kill_to_training_s for r in rs if r.kill_to_training_s is not None]
        k2t_s = f"{statistics.median(k2t):.1f} ({statistics.median(k2t) / base_s:.2f}x)" if k2t else "-"
        ok = sum(1 for r in rs if r.final_state == "SUCCEEDED" or (point == "detached" and r.final_step >= steps))
        print(f"{point:<10} {len(rs):>4} {sum(r.killed for r in rs):>6} {sum(r.left_after_reap for r in rs):>9} "
              f"{sum(r.left_at_end for r in rs):>8} {sum(r.resumed_incomplete for r in rs):>10} "
              f"{max(lost) if lost else '-':>8} {k2t_s:>24} {ok:>9}")
    print(f"\ntotal: {len(runs)} runs; instances left after reap {sum(r.left_after_reap for r in runs)} (goal 0); "
          f"left at the end {sum(r.left_at_end for r in runs)} (goal 0); resumes from an incomplete checkpoint "
          f"{sum(r.resumed_incomplete for r in runs)} (goal 0); steps lost per kill max "
          f"{max([r.steps_lost for r in runs if r.steps_lost is not None] or [0])} (goal <= {every})")
    for r in runs:
        if r.notes or r.left_after_reap or r.left_at_end or r.resumed_incomplete:
            print(f"  {r.point} {r.job}: {r.final_state} step {r.final_step}; {'; '.join(r.notes)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--points", default=",".join(POINTS))
    ap.add_argument("--json", dest="as_json", help="also write every run's figures to this file")
    args = ap.parse_args()
    points = [p for p in args.points.split(",") if p]
    rng = random.Random(args.seed)
    base = Path(tempfile.mkdtemp(prefix="lp-faults-"))
    cloud = Cloud(base)
    runs: list[Run] = []
    try:
        write_home(cloud, base / "home", base)
        h = Harness(cloud, base, write_recipe(base, args.steps, args.every), args.every, args.steps)
        base_s = baseline(h)
        for i in range(args.runs):
            point = points[i % len(points)]
            t0 = time.monotonic()
            r = h.one(i, point, rng)
            runs.append(r)
            print(f"[{i + 1}/{args.runs}] {point:<9} {r.job}: killed={r.killed} training={r.reached_training} "
                  f"left/reap={r.left_after_reap} end={r.final_state}@{r.final_step} left={r.left_at_end} "
                  f"lost={r.steps_lost} k2t={r.kill_to_training_s and round(r.kill_to_training_s, 1)} "
                  f"({time.monotonic() - t0:.0f} s){' ' + '; '.join(r.notes) if r.notes else ''}", flush=True)
        report(runs, base_s, args.every, args.steps)
        if args.as_json:
            Path(args.as_json).write_text(json.dumps([r.__dict__ for r in runs], indent=1))
    finally:
        cloud.close()


if __name__ == "__main__":
    main()
