"""Cold start: where `launchpad up` spends its time before the first training step, phase by phase.

    python benchmarks/cold_start.py                        # every scenario: ~5 min and ~25 GB of /tmp on 2 cores
    python benchmarks/cold_start.py --scenarios stack-fresh,stack-warm     # a host with PyTorch only: ~1 min
    python benchmarks/cold_start.py --steps 100            # the recipe's own length instead of --smoke's 10 steps
    python benchmarks/cold_start.py --provider aws --scenarios stack-fresh,stack-warm   # on moto's EC2 + S3

Runs the real CLI (`up recipes/smoke-lora.yaml --provider ssh --json`, the shipped recipe with its dataset
path made absolute and a file:// checkpoint store) against a loopback sshd (launchpad.testing_ssh), then
reads the phases `launchpad status JOB --json` reports (launchpad.phases): provision, reachable, sync,
environment, launch, prewarm, loading, first_step and the total time to the first step.

Scenarios (each its own LAUNCHPAD_HOME; a "fresh" host root has no venv, no uv, no uv cache):
  stack-fresh   host python = this venv's (torch, transformers, peft, trl ...: a Deep Learning AMI, Lambda
                Stack or a PyTorch image): the stack is reused and checked, only launchpad is installed
  stack-warm    the same host root again: the venv is reused
  bare-pip      a bare host python (a fresh `python -m venv`), installed the way launchpad did before uv:
                `pip install launchpad[train]` from the index (the "before" of this benchmark)
  bare-fresh    a bare host python, a fresh root and an empty store: uv (fetched from the index) resolves,
                downloads and installs; the agent then fills the store's wheel cache
  bare-second   a fresh root, the same store: the job's next instance installs from the wheel cache
  bare-warm     bare-second's root again: the venv is reused

Baseline, measured in the same run: the floor no start-up can go under on this host, a bare `ssh host true`
(OpenSSH's client, connection included) plus `python -c 'import torch'` with the stack's python; each
phase and the total are printed as a ratio to it, and "overhead" is total - floor.

Not measured here, listed with configs/providers.yaml's figure and source: what a real cloud adds before
`reachable` (boot: create -> SSH) and, for container platforms, the image pull. On this machine the package
"index" is pip's configuration here (local file:// mirrors and PyPI through a proxy), so "from the index" is
mostly a local disk read; on a real instance it is a download of ~3 GB, which the wheel cache turns into an
in-region object-store read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from launchpad.phases import PHASES  # noqa: E402
from launchpad.testing_ssh import LoopbackSshd  # noqa: E402

SCENARIOS = ("stack-fresh", "stack-warm", "bare-pip", "bare-fresh", "bare-second", "bare-warm")
#: the phases a real cloud adds before launchpad's own, with the providers they apply to
CLOUD_PHASES = {"boot (create -> SSH)": ("aws", "gcp", "azure", "lambda", "vast", "fluidstack", "paperspace"),
                "image pull (container platforms)": ("vast", "runpod", "kubernetes")}


@dataclass
class Host:
    """One host root and the interpreter it runs launchpad's venv from."""

    python: str
    root: Path
    store: Path
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class Result:
    scenario: str
    wall: float  # `up` from start to its return (training included)
    phases: dict[str, Any]


def up_smoke(home: Path, work: Path, provider: str, steps: int | None, *, checkpoint_uri: str | None = None,
             resources: dict | None = None) -> tuple[float, dict[str, Any]]:
    """`up` of the shipped smoke recipe (dataset path made absolute) in `home` on `provider`, then `status`:
    (wall seconds of `up`, the job's phase_times)."""
    import yaml

    recipe = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    recipe["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    if checkpoint_uri:
        recipe["checkpoint"] = {**recipe.get("checkpoint", {}), "uri": checkpoint_uri}
    if resources:
        recipe["resources"] = resources
    if steps:
        recipe["max_steps"] = steps
    path = work / "smoke-lora.yaml"
    path.write_text(yaml.safe_dump(recipe))
    env = {**os.environ, "LAUNCHPAD_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "launchpad", "up", str(path), "--provider", provider, "--json"]
    t0 = time.monotonic()
    up = subprocess.run(cmd + ([] if steps else ["--smoke"]), capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.monotonic() - t0
    if up.returncode != 0:
        raise SystemExit(f"up failed ({up.returncode}): {up.stderr.strip()[-2000:]}")
    job_id = json.loads(up.stdout)["id"]
    st = subprocess.run([sys.executable, "-m", "launchpad", "status", job_id, "--json"], capture_output=True, text=True,
                        env=env, cwd=REPO, check=True)
    row = json.loads(st.stdout)
    return wall, (row[0] if isinstance(row, list) else row)["phase_times"]


def run_up_over_ssh(sshd: LoopbackSshd, host: Host, work: Path, steps: int | None) -> tuple[float, dict[str, Any]]:
    """`up` of the smoke recipe on `host` through the ssh provider; (wall seconds, status's phase_times)."""
    home = work / "home"
    home.mkdir(parents=True)
    cfg = sshd.config()
    entry = {"name": "bench", "address": "127.0.0.1", "port": cfg["port"], "user": cfg["user"], "key": cfg["key"],
             "host_key": cfg["host_key"], "python": host.python, "root": str(host.root), "connect_timeout": 10}
    import yaml

    (home / "hosts.yaml").write_text(yaml.safe_dump({"hosts": [entry]}))
    if host.config:
        (home / "config.yaml").write_text(yaml.safe_dump({"providers": {"ssh": host.config}}))
    return up_smoke(home, work, "ssh", steps, checkpoint_uri=host.store.as_uri())


def run_up_on_aws(sshd: LoopbackSshd, host: Host, work: Path, steps: int | None) -> tuple[float, dict[str, Any]]:
    """`up` of the smoke recipe through the aws provider on moto's EC2 + S3 (started by main), every instance
    reached at the loopback sshd through an ssh config ``Host *`` (moto's public addresses are never dialled);
    the checkpoint store, and with it the wheel cache, is an s3:// bucket in moto. Provision = EC2 calls."""
    import boto3
    import yaml

    home = work / "home"
    home.mkdir(parents=True)
    cfg = sshd.config()
    ssh_config = work / "ssh_config"
    ssh_config.write_text(f"Host *\n  HostName 127.0.0.1\n  Port {cfg['port']}\n  User {cfg['user']}\n")
    bucket = f"lp-bench-{host.store.name}"
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=bucket)
    settings = {"regions": ["us-east-1"], "ssh_cidr": "127.0.0.1/32", "ami_name": "Deep Learning AMI Ubuntu Linux*",
                "key": cfg["key"], "ssh_config": str(ssh_config), "python": host.python, "root": str(host.root),
                "live_prices": False, "shutdown_command": ["true"], "checkpoint_uri": f"s3://{bucket}/ckpt",
                **host.config}
    (home / "config.yaml").write_text(yaml.safe_dump({"providers": {"aws": settings}}))
    return up_smoke(home, work, "aws", steps, resources={"regions": ["us-east-1"]})


RUNNERS = {"ssh": run_up_over_ssh, "aws": run_up_on_aws}


def median_seconds(argv: list[str], repeat: int = 3, **kw) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.monotonic()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kw)
        times.append(time.monotonic() - t0)
    return statistics.median(times)


def floor(sshd: LoopbackSshd, stack_python: str) -> dict[str, float]:
    cfg = sshd.config()
    known = Path(cfg["key"]).parent / "known_hosts"
    known.write_text(f"[127.0.0.1]:{cfg['port']} {cfg['host_key']}\n")
    ssh = ["ssh", "-p", str(cfg["port"]), "-i", cfg["key"], "-o", f"UserKnownHostsFile={known}",
           "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"{cfg['user']}@127.0.0.1", "true"]
    out = {"ssh host true": median_seconds(ssh)}
    out["python -c 'import torch'"] = median_seconds([stack_python, "-c", "import torch"],
                                                     env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    return out


def bare_python(where: Path) -> str:
    """A host interpreter without the training stack: a fresh venv of this Python (pip only)."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
    return str(where / "bin" / "python")


def cloud_estimates() -> list[tuple[str, str, str]]:
    from launchpad.planner.catalog import facts_for

    rows = []
    for phase, providers in CLOUD_PHASES.items():
        for name in providers:
            f = facts_for(name)
            if phase.startswith("boot") and f.known:
                rows.append((phase, name, f"{f.boot_s:.0f} s ({f.source('boot_s') or 'providers.yaml'})"))
            elif not phase.startswith("boot"):
                rows.append((phase, name, "depends on the image's size and the registry (no figure in providers.yaml)"))
    return rows


def report(results: list[Result], base: dict[str, float]) -> None:
    total_floor = sum(base.values())
    print("\nbaseline (floor, median of 3):")
    for name, secs in base.items():
        print(f"  {name:<28} {secs:7.2f} s")
    print(f"  {'floor':<28} {total_floor:7.2f} s")
    print("\nseconds per phase [x floor]; total = the start of `up` -> the end of the first training step")
    width = 16
    print(f"{'phase':<12}" + "".join(f"{r.scenario:>{width}}" for r in results))
    for phase in (*PHASES, "total"):
        cells = []
        for r in results:
            span = r.phases.get(phase)
            cells.append(f"{span['seconds']:.2f} [{span['seconds'] / total_floor:.1f}x]" if span else "-")
        print(f"{phase:<12}" + "".join(f"{c:>{width}}" for c in cells))
    overheads = []
    for r in results:
        total = (r.phases.get("total") or {}).get("seconds")
        overheads.append(f"{total - total_floor:.2f}" if total is not None else "-")
    print(f"{'overhead':<12}" + "".join(f"{c:>{width}}" for c in overheads) + "   (total - floor)")
    print(f"{'up wall':<12}" + "".join(f"{r.wall:>{width}.1f}" for r in results) + "   (training and teardown included)")
    print("\nenvironment set-up on the host (launchpad.ssh.venv_setup's own timings, s):")
    for r in results:
        d = r.phases.get("environment_detail") or {}
        timings = ", ".join(f"{k} {v:.1f}" for k, v in (d.get("env_seconds") or {}).items() if v >= 0.05)
        how = f"{d.get('installer')}, from {d.get('source')}" if d.get("installer") else "nothing to install"
        print(f"  {r.scenario:<12} venv {d.get('venv')}, {how}"
              f"{', wheel cache ' + d['wheel_cache'] if d.get('wheel_cache') else ''}: {timings}")
    print("\nnot measured here (a real cloud adds them before `reachable`):")
    for phase, provider, figure in cloud_estimates():
        print(f"  {phase:<34} {provider:<11} {figure}")


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--provider", choices=sorted(RUNNERS), default="ssh")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, of {', '.join(SCENARIOS)}")
    ap.add_argument("--steps", type=int, default=None, help="train this many steps (default: --smoke, 10)")
    ap.add_argument("--keep", action="store_true", help="keep the hosts' roots and stores (several GB) afterwards")
    args = ap.parse_args()
    wanted = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if unknown := set(wanted) - set(SCENARIOS):
        ap.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    base_dir = Path(tempfile.mkdtemp(prefix="lp-cold-start-"))
    moto = None
    sshd_env: dict[str, str] = {}
    if args.provider == "aws":  # moto's EC2 + S3 in its own process; the sshd's sessions get its endpoint
        from _moto import MotoServer

        moto = MotoServer()
        sshd_env = {k: os.environ[k] for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                "AWS_DEFAULT_REGION")}
    sshd = LoopbackSshd(base_dir / "sshd", env=sshd_env).start()
    run = RUNNERS[args.provider]
    try:
        base = floor(sshd, sys.executable)
        bare = bare_python(base_dir / "bare-python") if any(s.startswith("bare") for s in wanted) else ""
        hosts = {
            "stack-fresh": Host(sys.executable, base_dir / "stack-root", base_dir / "stack-store"),
            "bare-pip": Host(bare, base_dir / "pip-root", base_dir / "pip-store", {"installer": "pip"}),
            "bare-fresh": Host(bare, base_dir / "bare-root-1", base_dir / "bare-store"),
            "bare-second": Host(bare, base_dir / "bare-root-2", base_dir / "bare-store"),
        }
        hosts["stack-warm"], hosts["bare-warm"] = hosts["stack-fresh"], hosts["bare-second"]
        results = []
        for name in [s for s in SCENARIOS if s in wanted]:
            print(f"{name} ...", flush=True)
            wall, phases = run(sshd, hosts[name], base_dir / "runs" / name, args.steps)
            results.append(Result(name, wall, phases))
            env = phases.get("environment", {}).get("seconds")
            print(f"  environment {env} s, time to first step {phases.get('total', {}).get('seconds')} s", flush=True)
        report(results, base)
    finally:
        sshd.stop()
        if moto is not None:
            moto.stop()
        if not args.keep:
            shutil.rmtree(base_dir, ignore_errors=True)
        else:
            print(f"kept {base_dir}")


if __name__ == "__main__":
    main()
