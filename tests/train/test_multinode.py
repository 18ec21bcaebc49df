"""How the trainer is started (`trainer_command`), and 2 "nodes" for real: two trainer launches with
node_rank 0 and 1, each with its own work directory (no shared filesystem, as on two machines), one
store, DeepSpeed ZeRO-2 over gloo on 127.0.0.1. Files only node 1 wrote (its optimizer shard and RNG
state) reach the checkpoint through the store; resume works on both nodes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from trainrun import (
    extensions_dir,
    finish,
    free_port,
    launch,
    losses,
    status_of,
    step_lines,
    trainer_env,
    write_spec,
)

from launchpad.storage import open_store
from launchpad.storage.checkpoints import latest_checkpoint
from launchpad.train.launch import trainer_command

TRAIN = ["-m", "launchpad.train", "--spec"]


def _spec(tmp_path, recipe="smoke-lora", **extra) -> tuple:
    spec = write_spec(tmp_path, recipe, "j", max_steps=5, **extra)
    return tmp_path / "job.json", spec


def test_plain_lora_and_full_run_as_one_process(tmp_path):
    path, spec = _spec(tmp_path)
    argv, env = trainer_command(path, spec, nproc_per_node=1)
    assert argv == [sys.executable, *TRAIN, str(path.resolve())]
    assert set(env) <= {"OMP_NUM_THREADS", "TORCH_EXTENSIONS_DIR"}  # defaults only, no secrets, no overrides


def test_deepspeed_or_several_gpus_use_torchrun_standalone(tmp_path):
    path, spec = _spec(tmp_path, "smoke-full-zero2")
    argv, env = trainer_command(path, spec, nproc_per_node=1)
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--standalone" in argv and argv[argv.index("--nproc_per_node") + 1] == "1"
    assert Path(argv[argv.index("--log-dir") + 1]).parent == path.resolve().parent  # beside the job, not in /tmp
    assert argv[-4:] == [*TRAIN, str(path.resolve())]
    path, spec = _spec(tmp_path)
    argv, _ = trainer_command(path, spec, nproc_per_node=4)
    assert argv[argv.index("--nproc_per_node") + 1] == "4"


def test_multi_node_gets_rank_master_and_a_hostfile(tmp_path):
    nodes = [{"rank": 1, "address": "10.0.0.6"}, {"rank": 0, "address": "10.0.0.5"}]
    path, spec = _spec(tmp_path, overrides={"resources.nodes": 2}, nodes=nodes, node_rank=1, master_port=29511)
    argv, _ = trainer_command(path, spec, nproc_per_node=8)
    opts = dict(zip(argv[3:-4:2], argv[4:-4:2], strict=True))
    assert opts == {"--nproc_per_node": "8", "--log-dir": str(tmp_path / "torchrun"), "--nnodes": "2", "--node_rank": "1",
                    "--master_addr": "10.0.0.5", "--master_port": "29511"}
    assert (tmp_path / "hostfile").read_text() == "10.0.0.5 slots=8\n10.0.0.6 slots=8\n"
    # keyword arguments win over the spec
    argv, _ = trainer_command(path, spec, nproc_per_node=1, node_rank=0, master_addr="127.0.0.1", master_port=1234)
    assert argv[argv.index("--node_rank") + 1] == "0" and argv[argv.index("--master_addr") + 1] == "127.0.0.1"
    # the deepspeed launcher: one per node, no ssh fan-out
    argv, _ = trainer_command(path, spec, nproc_per_node=8, launcher="deepspeed")
    assert argv[1:3] == ["-m", "deepspeed.launcher.runner"] and "--no_ssh" in argv
    assert argv[argv.index("--hostfile") + 1] == str(tmp_path / "hostfile")
    assert argv[-4:] == ["--module", "launchpad.train", "--spec", str(path.resolve())]
    with pytest.raises(ValueError, match="node_rank 2"):
        trainer_command(path, spec, node_rank=2)


def test_spec_rejects_bad_multinode_fields(tmp_path):
    from launchpad.errors import BadInput
    from launchpad.train.spec import TrainJob

    path, spec = _spec(tmp_path, nodes=[{"rank": 0, "address": "10.0.0.5; rm -rf /"}], master_port=70000)
    with pytest.raises(BadInput) as e:
        TrainJob.load(path)
    assert "nodes:" in str(e.value) and "master_port" in str(e.value)
    spec.update(nodes=[{"rank": 0, "address": "h0"}, {"rank": 2, "address": "h1"}], master_port=29500)
    path.write_text(json.dumps(spec))
    with pytest.raises(BadInput, match="ranks must be 0..1"):
        TrainJob.load(path)


def _two_nodes(tmp_path, max_steps: int, port: int) -> list:
    nodes = [{"rank": 0, "address": "127.0.0.1"}, {"rank": 1, "address": "127.0.0.1"}]
    specs = []
    for rank in (0, 1):
        specs.append(write_spec(
            tmp_path / f"node{rank}", "smoke-full-zero2", "mn", max_steps=max_steps, store=tmp_path / "store",
            overrides={"checkpoint.every_steps": 5, "resources.nodes": 2},
            nodes=nodes, node_rank=rank, master_addr="127.0.0.1", master_port=port))
    return specs


@pytest.mark.slow
def test_two_nodes_over_gloo_checkpoint_whole_and_resume(tmp_path, tmp_path_factory, pytestconfig):
    pytest.importorskip("deepspeed")
    env = trainer_env(tmp_path_factory.mktemp("lp-home"), extensions_dir(pytestconfig, tmp_path_factory))

    def both(max_steps: int) -> tuple[list, list[str]]:
        specs = _two_nodes(tmp_path, max_steps, free_port())
        procs = [launch(tmp_path / f"node{r}", env, nproc_per_node=1) for r in (0, 1)]
        results = [finish(p, timeout=240) for p in procs]
        for rc, log in results:
            assert rc == 0, log
        return specs, [log for _, log in results]

    specs, logs = both(10)
    assert "DeepSpeed ZeRO-2 on 2 processes (1 per node)" in logs[0]
    assert "checkpoint-10: gathered 2 files written on other nodes" in logs[0]
    assert "uploaded checkpoint-" not in logs[1]  # rank 0 alone uploads
    assert (tmp_path / "node0" / "hostfile").read_text() == "127.0.0.1 slots=1\n127.0.0.1 slots=1\n"
    store = open_store(specs[0]["checkpoint_uri"])
    assert latest_checkpoint(store, "mn").step == 10
    names = {o.key.split("checkpoint-10/", 1)[1] for o in store.list("mn/checkpoint-10/")}
    assert {"rng_state_1.pth", "global_step10/zero_pp_rank_1_mp_rank_00_optim_states.pt"} <= names
    first = losses(status_of(specs[0]))
    assert first[10] < first[1] - 1.5
    assert losses(status_of(specs[1])) == first  # node 1's own status.json sees the same (all-reduced) loss

    specs, logs = both(15)
    for log in logs:
        assert "resuming mn from checkpoint-10" in log and step_lines(log)[0] == 11
    status = status_of(specs[0])
    assert status["phase"] == "done" and status["step"] == 15
    after = losses(status)
    assert after[15] < after[10] < first[1]
    assert latest_checkpoint(store, "mn").step == 15
