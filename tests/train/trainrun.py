"""Helpers for the tests that start the real trainer through `launchpad.train.launch.trainer_command`
(test_qlora, test_deepspeed, test_multinode, test_envcheck, test_export). Not a test module."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from launchpad.recipe import load_recipe
from launchpad.train.launch import trainer_command

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"


def write_spec(root: Path, recipe: str, job_id: str, *, max_steps: int | None, store: Path | None = None,
               overrides: dict[str, Any] | None = None, **extra: Any) -> dict:
    """Write <root>/job.json for `recipes/<recipe>.yaml` (with overrides) and return the spec."""
    r = load_recipe(RECIPES / f"{recipe}.yaml", overrides=overrides or None)
    spec = {
        "job_id": job_id,
        "recipe": r.model_dump(mode="json"),
        "checkpoint_uri": (store or root / "store").as_uri(),
        "workdir": str(root / "work"),
        "status_path": str(root / "work" / "status.json"),
        "max_steps": max_steps,
        **extra,
    }
    root.mkdir(parents=True, exist_ok=True)
    (root / "job.json").write_text(json.dumps(spec))
    return spec


def trainer_env(home: Path, extensions: Path) -> dict[str, str]:
    """The environment an agent would give the trainer, with shared caches (tiny model, DeepSpeed ops)."""
    return {**os.environ, "LAUNCHPAD_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO),
            "TORCH_EXTENSIONS_DIR": str(extensions), "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}


def launch(root: Path, env: dict[str, str], *, log_name: str = "train.log", **kw: Any) -> subprocess.Popen:
    """Start the trainer for <root>/job.json as the agent would: argv and env from trainer_command."""
    spec = json.loads((root / "job.json").read_text())
    argv, extra = trainer_command(root / "job.json", spec, **kw)
    log_path = root / f"{time.monotonic_ns()}-{log_name}"
    with open(log_path, "w") as log:
        # `env` plays the agent's environment: what it sets wins over trainer_command's defaults.
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**extra, **env}, cwd=root,
                                start_new_session=True)
    proc.lp_log = log_path  # type: ignore[attr-defined]
    proc.lp_argv = argv  # type: ignore[attr-defined]
    return proc


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)  # its own session: the launcher and every rank
        proc.wait(timeout=30)
    return proc.returncode, Path(proc.lp_log).read_text()  # type: ignore[attr-defined]


def run(root: Path, env: dict[str, str], timeout: float = 240, **kw: Any) -> tuple[int, str]:
    return finish(launch(root, env, **kw), timeout)


def status_of(spec: dict) -> dict:
    return json.loads(Path(spec["status_path"]).read_text())


def losses(status: dict) -> dict[int, float]:
    return {int(s): float(v) for s, v in status["losses"]}


def step_lines(log: str) -> list[int]:
    return [int(line.split()[1].split("/")[0]) for line in log.splitlines() if line.startswith("step ")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def extensions_dir(config, tmp_path_factory) -> Path:
    """DeepSpeed's compiled ops, kept between runs in pytest's cache (compiling costs ~25-40 s)."""
    cache = getattr(config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("lp-torch-extensions"))
    return tmp_path_factory.mktemp("torch-extensions")
