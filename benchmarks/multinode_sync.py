"""Multi-node sync: setting up N nodes at once against one after another (`VMProvider.sync`).

    python benchmarks/multinode_sync.py                    # 2 and 4 nodes, 3 rounds each: ~3 min on 2 cores
    python benchmarks/multinode_sync.py --nodes 8 --rounds 2

Each node is a loopback sshd "host" (launchpad.testing_ssh) through the ssh provider, its interpreter this
venv's (a machine image with PyTorch: the stack is reused, launchpad's wheel installed and the environment
checked). Every round wipes the hosts' roots first, as on freshly booted machines, then syncs the same
N-node job both ways, the order alternating: `one after another` (each node's `_sync_node` in turn, what
launchpad did before) and `at once` (`provider.sync`, one thread per node). Printed: the median seconds of
each and the speed-up of `at once`, measured in the same run.

On this machine every "node" shares the same 2 cores (each environment check imports torch), so the
speed-up here is a floor: on a cloud each node is its own machine and its own network path, and the sync
takes about as long for N nodes as for one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from launchpad.testing_ssh import LoopbackSshd  # noqa: E402


def write_hosts(home: Path, servers: list[LoopbackSshd]) -> None:
    import yaml

    hosts = [{**s.config(), "name": f"node-{i}"} for i, s in enumerate(servers)]
    (home / "hosts.yaml").write_text(yaml.safe_dump({"hosts": hosts}, sort_keys=False))


def bundle(work: Path, job_id: str):
    import yaml

    from launchpad.jobspec import JobSpec
    from launchpad.models import Bundle
    from launchpad.recipe import load_recipe

    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    path = work / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    recipe = load_recipe(path)
    spec = {"job_id": job_id, "recipe": recipe.model_dump(mode="json"), "checkpoint_uri": (work / "ckpt").as_uri()}
    return Bundle(job_spec=JobSpec.from_json(spec), recipe_text=path.read_text(), env={})


def fresh_roots(servers: list[LoopbackSshd]) -> None:
    """What a newly booted machine has under launchpad's root: nothing but the claim of this job."""
    for s in servers:
        root = Path(s.config()["root"])
        for name in ("venvs", "wheels", "jobs", "tools", "wheelhouse"):
            shutil.rmtree(root / name, ignore_errors=True)


def measure(n: int, rounds: int, base: Path) -> tuple[list[float], list[float]]:
    from launchpad_ssh import SSHProvider

    from launchpad.models import JOB_TAG, InstanceSpec

    servers = [LoopbackSshd(base / f"host-{i}", name=f"node-{i}").start() for i in range(n)]
    home = base / "home"
    home.mkdir()
    os.environ["LAUNCHPAD_HOME"] = str(home)
    write_hosts(home, servers)
    provider = SSHProvider({})
    job = f"bench-{n}"
    offer = next(o for o in provider.offers() if o.instance_type == "node-0")
    inst = provider.provision(offer, InstanceSpec(job_id=job, token=f"{job}-0", tags={JOB_TAG: job}, nodes=n))
    try:
        nodes, b = provider.nodes(inst), bundle(base, job)
        from launchpad.wheel import build_wheel

        wheel = build_wheel()
        seq: list[float] = []
        par: list[float] = []
        for r in range(rounds):
            for way in (("seq", "par") if r % 2 == 0 else ("par", "seq")):
                fresh_roots(servers)
                t0 = time.monotonic()
                if way == "seq":
                    for node in nodes:
                        provider._sync_node(node, b, wheel, "")
                else:
                    provider.sync(inst, b)
                (seq if way == "seq" else par).append(time.monotonic() - t0)
                print(f"  {n} nodes, round {r + 1}, {'one after another' if way == 'seq' else 'at once'}: "
                      f"{(seq if way == 'seq' else par)[-1]:.1f} s", flush=True)
        return seq, par
    finally:
        provider.teardown(inst)
        provider.close()
        for s in servers:
            s.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="2,4", help="comma-separated node counts (default 2,4)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for n in (int(x) for x in args.nodes.split(",")):
        with tempfile.TemporaryDirectory(prefix=f"lp-mnsync-{n}-") as tmp:
            seq, par = measure(n, args.rounds, Path(tmp))
        rows.append((n, statistics.median(seq), statistics.median(par)))
    print(f"\n{'nodes':>5}  {'one after another':>18}  {'at once':>8}  {'speed-up':>8}")
    for n, s, p in rows:
        print(f"{n:>5}  {s:>16.1f} s  {p:>6.1f} s  {s / p:>7.2f}x")


if __name__ == "__main__":
    main()
