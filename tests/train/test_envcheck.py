"""The environment check before training (versions recorded, mismatches fail fast in one line) and the
out-of-memory advice (a real CPU OOM under an address-space limit)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from trainrun import (
    REPO,
    extensions_dir,
    finish,
    launch,
    status_of,
    trainer_env,
    write_spec,
)

from launchpad.recipe import load_recipe
from launchpad.train.envcheck import problems
from launchpad.train.oom import is_oom, oom_advice

SMOKE = REPO / "recipes" / "smoke-lora.yaml"


def env_of(**changes) -> dict:
    """A machine description in collect()'s shape (data, as env.json holds it)."""
    env: dict[str, Any] = {
           "versions": {"torch": "2.5.1+cu121", "bitsandbytes": "0.45.0", "deepspeed": "0.16.0", "flash-attn": "2.7.0",
                        "transformers": "4.56.0"},
           "torch_cuda": "12.1", "cuda_available": True, "driver": "550.54", "driver_cuda": "12.4",
           "gpus": [{"name": "NVIDIA A100-SXM4-40GB", "memory_gb": 39.4, "capability": "8.0"}]}
    for key, value in changes.items():
        if key in env["versions"]:
            env["versions"][key] = value
        else:
            env[key] = value
    return env


def recipe(**overrides):
    return load_recipe(SMOKE, overrides=overrides or None)


def test_a_matching_machine_has_no_problems():
    assert problems(recipe(**{"adapter": "qlora", "resources.gpu": "A100", "resources.cuda": "12.1",
                              "flash_attention": True}), env_of(), deepspeed=True) == []


@pytest.mark.parametrize("overrides, env, expected", [
    ({"resources.gpu": "A100"}, dict(cuda_available=False, torch_cuda=None, gpus=[], torch="2.5.1+cpu"),
     "the recipe asks for GPUs (A100) but torch sees none: torch 2.5.1+cpu is a CPU build"),
    ({"resources.gpu": "A100"}, dict(cuda_available=False, gpus=[]),
     "the recipe asks for GPUs (A100) but torch sees none: the driver 550.54 cannot run torch's CUDA 12.1"),
    ({"resources.gpu": "A100", "resources.cuda": "12.4"}, {}, "resources.cuda 12.4: torch 2.5.1+cu121 is built for CUDA 12.1"),
    ({"adapter": "qlora"}, dict(bitsandbytes=None), "adapter: qlora needs bitsandbytes"),
    ({"flash_attention": True}, {"flash-attn": None}, "flash_attention: true, but flash-attn is not installed"),
    ({"flash_attention": True}, {"flash-attn": None, "torch_varlen": True, "gpus": [], "cuda_available": False},
     "flash_attention: true needs a CUDA GPU"),  # torch's own FlashAttention needs one too
    ({"flash_attention": True}, dict(gpus=[{"name": "Tesla T4", "memory_gb": 15, "capability": "7.5"}]),
     "flash_attention: true needs compute capability >= 8.0; Tesla T4 has 7.5"),
    ({"flash_attention": True}, dict(torch_cuda="11.6"), "flash_attention: true needs CUDA >= 11.7"),
])
def test_mismatches_are_one_clear_line(overrides, env, expected):
    found = problems(recipe(**overrides), env_of(**env))
    assert found and found[0].startswith(expected), found
    assert all("\n" not in p for p in found)


def test_flash_attention_auto_never_blocks_a_run():
    assert problems(recipe(), env_of(**{"flash-attn": None, "gpus": [], "cuda_available": False})) == []


def test_envcheck_command_records_the_machine_and_checks_a_spec(tmp_path):
    out = tmp_path / "env.json"
    proc = subprocess.run([sys.executable, "-m", "launchpad.train.envcheck", "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    env = json.loads(out.read_text())
    assert env["versions"]["torch"] and env["versions"]["transformers"] and "driver" in env and "gpus" in env
    write_spec(tmp_path, "smoke-lora", "gpu-1", max_steps=1, overrides={"resources.gpu": "H100:8"})
    proc = subprocess.run([sys.executable, "-m", "launchpad.train.envcheck", "--out", str(out), "--spec",
                           str(tmp_path / "job.json")], capture_output=True, text=True, timeout=120)
    if json.loads(out.read_text())["cuda_available"]:
        pytest.skip("this machine has a GPU")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("error: the recipe asks for GPUs (H100:8) but torch sees none")


@pytest.fixture(scope="module")
def env(tmp_path_factory, pytestconfig) -> dict[str, str]:
    return trainer_env(tmp_path_factory.mktemp("lp-home"), extensions_dir(pytestconfig, tmp_path_factory))


@pytest.mark.slow
def test_trainer_fails_fast_on_a_gpu_recipe_without_a_gpu(tmp_path, env):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    spec = write_spec(tmp_path, "smoke-lora", "nogpu-1", max_steps=5, overrides={"resources.gpu": "A100:40GB.."})
    t0 = time.monotonic()
    rc, log = finish(launch(tmp_path, env), timeout=120)
    assert rc == 1, log
    assert time.monotonic() - t0 < 60  # before the model, the data or any training
    status = status_of(spec)
    assert status["phase"] == "failed"
    assert status["error"].startswith("the recipe asks for GPUs (A100:40GB..) but torch sees none: torch ")
    assert "Traceback" not in log and "dataset:" not in log
    recorded = json.loads((Path(spec["workdir"]) / "env.json").read_text())
    assert recorded["problems"] == [status["error"]]


def test_oom_is_recognised_and_the_advice_is_the_next_smaller_step():
    import torch

    assert is_oom(torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(MemoryError())
    assert is_oom(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8589934592 bytes."))
    assert not is_oom(RuntimeError("shape mismatch"))
    line = oom_advice(recipe(micro_batch_size=8, gradient_accumulation_steps=2), on_gpu=True)
    assert line.startswith("out of GPU memory at micro_batch_size 8, sequence_len 128: try micro_batch_size: 4 "
                           "with gradient_accumulation_steps: 4 (same effective batch); or gradient_checkpointing: true; "
                           "or adapter: qlora")
    line = oom_advice(recipe(micro_batch_size=1, adapter="qlora"), on_gpu=True)
    assert "try a shorter sequence_len than 128 or a GPU with more memory" in line
    line = oom_advice(recipe(micro_batch_size=1, adapter="full", gradient_checkpointing=True), on_gpu=False)
    assert "out of CPU memory" in line and "adapter: qlora; or deepspeed: zero3-offload" in line


def _limit_address_space(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


@pytest.mark.slow
def test_a_real_out_of_memory_ends_with_one_line_of_advice(tmp_path, env):
    # Long rows and a big micro batch on the tiny model, under a 3.2 GB address-space limit (the
    # imports take ~2.1 GB): the first forward pass cannot allocate its logits.
    words = (REPO / "launchpad" / "train" / "data" / "corpus.txt").read_text().split()
    rows = [{"text": " ".join(words[(i * 2000) % 15000:(i * 2000) % 15000 + 2000])} for i in range(32)]
    data = tmp_path / "long.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = write_spec(tmp_path, "smoke-lora", "oom-1", max_steps=2, overrides={
        "micro_batch_size": 32, "sequence_len": 2048, "datasets": [{"path": str(data), "type": "completion"}]})
    env = {**env, "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
    from launchpad.train.launch import trainer_command

    argv, extra = trainer_command(tmp_path / "job.json", json.loads((tmp_path / "job.json").read_text()))
    proc = subprocess.run(argv, env={**extra, **env}, capture_output=True, text=True, timeout=180,
                          preexec_fn=_limit_address_space(3_200_000_000))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 1, log
    error = status_of(spec)["error"]
    assert error.startswith("out of CPU memory at micro_batch_size 32, sequence_len 2048: try micro_batch_size: 16"), log
    assert f"error: {error}" in log
