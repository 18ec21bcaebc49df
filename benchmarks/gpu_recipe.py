"""The QLoRA recipe on a real GPU, as is: tokens/s and peak GPU memory against the planner's estimate.

    python benchmarks/gpu_recipe.py                        # recipes/qlora-8b.yaml on a ~1.1B Llama
    python benchmarks/gpu_recipe.py --shape 8b --steps 8   # the real Llama-3-8B shape (random weights)
    python benchmarks/gpu_recipe.py --json result.json
    python benchmarks/gpu_recipe.py --shape 1b --set adapter=lora --set gradient_accumulation_steps=2
    python benchmarks/gpu_recipe.py --shape tiny --steps 4 --allow-cpu   # check the script on a CPU box

No downloads (a lent GPU box reaches nothing): the base model is a random-init Llama of a known shape
built here (on the GPU, seconds) with launchpad's builtin tokenizer, and the data is synthetic text long
enough that every example is `sequence_len` tokens, so tokens/s and memory mean what they would with
real data. Everything else is the recipe's own: 4-bit NF4 + double quant, bf16 compute, LoRA r=64 on
q/v, micro batch 4 x accumulation 8, paged 8-bit AdamW, gradient checkpointing, FlashAttention-2 if
installed. The trainer runs exactly as the agent starts it (`launchpad.train.launch.trainer_command`).

Measured: tokens/s (median over the steps after `--warmup`), peak memory three ways (torch allocated,
torch reserved, nvidia-smi used: the last includes the CUDA context, like the planner's estimate),
against `launchpad.planner.memory.estimate_memory` for the same shape and recipe; the ratio
measured / estimated is the number to watch (the planner is meant to err high, < 1.0).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# Llama-family shapes: hidden, intermediate, layers, heads, kv heads, vocab.
SHAPES = {
    "tiny": (128, 256, 2, 4, 2, 1024),
    "1b": (2048, 5632, 22, 32, 4, 32000),     # TinyLlama-1.1B
    "3b": (3072, 8192, 28, 24, 8, 128256),    # Llama-3.2-3B
    "8b": (4096, 14336, 32, 32, 8, 128256),   # Llama-3-8B
}


def build_model(shape: str, dest: Path) -> Path:
    """A random-init Llama of `shape` in bf16 with the builtin tokenizer, saved as an HF folder (cached)."""
    if (dest / "config.json").is_file():
        return dest
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from launchpad.train.tiny import build_tokenizer

    h, i, layers, heads, kv, vocab = SHAPES[shape]
    tok = build_tokenizer()
    # rope_theta is not in the typed signature of newer transformers, which still take it through **kwargs
    config = LlamaConfig(  # type: ignore[call-arg]
                         hidden_size=h, intermediate_size=i, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv, vocab_size=vocab, max_position_embeddings=8192, rope_theta=500000.0,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         tie_word_embeddings=False, dtype="bfloat16")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    with torch.device(device):
        # transformers types PreTrainedModel.to() with a decorator that loses torch's (dtype) overloads
        model = LlamaForCausalLM(config).to(torch.bfloat16)  # type: ignore[arg-type]
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    del model
    os.replace(tmp, dest)
    return dest


def build_data(path: Path, rows: int, sequence_len: int) -> Path:
    """Completion rows of corpus text, each several times longer than `sequence_len` tokens."""
    words = (REPO / "launchpad" / "train" / "data" / "corpus.txt").read_text().split()
    need = sequence_len * 2  # the builtin BPE makes >= 1 token per word
    out = []
    for r in range(rows):
        start = (r * 997) % len(words)
        chunk = (words[start:] + words) * (need // len(words) + 1)
        out.append(json.dumps({"text": " ".join(chunk[:need])}))
    path.write_text("\n".join(out) + "\n")
    return path


class SmiPoller:
    """Peak `nvidia-smi` memory.used (MiB, summed over GPUs) while the trainer runs."""

    def __init__(self, interval: float = 0.2):
        self.peak_mib: float | None = None
        self.interval = interval
        self._stop = threading.Event()
        self._exe = shutil.which("nvidia-smi")
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        if self._exe is None:
            return
        while not self._stop.wait(self.interval):
            try:
                out = subprocess.run([self._exe, "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True, timeout=10).stdout
                used = sum(float(x) for x in out.split())
                self.peak_mib = max(self.peak_mib or 0.0, used)
            except (OSError, subprocess.SubprocessError, ValueError):
                pass

    def __enter__(self) -> SmiPoller:
        if self._exe:
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._exe:
            self._thread.join(timeout=15)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipe", default=str(REPO / "recipes" / "qlora-8b.yaml"))
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    ap.add_argument("--steps", type=int, default=20, help="optimizer steps to run")
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of the tokens/s median")
    ap.add_argument("--workdir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "lp-gpu-bench")
    ap.add_argument("--json", dest="json_out", default=None, help="also write the result here ('-' = stdout)")
    ap.add_argument("--allow-cpu", action="store_true", help="run without a GPU (checks the script only)")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                    help="override a recipe field (dotted keys, YAML values), e.g. adapter=lora; repeatable")
    args = ap.parse_args()

    import torch

    from launchpad.planner.memory import estimate_memory, model_shape, setup_from_recipe
    from launchpad.recipe import load_recipe
    from launchpad.train.launch import trainer_command

    on_gpu = torch.cuda.is_available()
    if not on_gpu and not args.allow_cpu:
        print("no CUDA GPU here (torch.cuda.is_available() is False); --allow-cpu runs it anyway", file=sys.stderr)
        return 2
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    model_dir = build_model(args.shape, work / f"llama-{args.shape}")
    overrides = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.sets)}
    base = load_recipe(args.recipe, overrides=overrides)
    rows = max(64, args.steps * base.micro_batch_size * base.gradient_accumulation_steps)
    data = build_data(work / f"data-{base.sequence_len}.jsonl", rows, base.sequence_len)
    overrides |= {"base_model": str(model_dir), "datasets": [{"path": str(data), "type": "completion"}],
                 "max_steps": args.steps, "logging_steps": 1, "checkpoint.every_steps": 10**9}
    if not on_gpu:
        overrides["resources.gpu"] = None
    recipe = load_recipe(args.recipe, overrides=overrides)
    print(f"model {args.shape} ready in {time.monotonic() - t0:.0f}s: {model_dir}")

    run_dir = work / f"run-{int(time.time())}"
    spec = {"job_id": "gpu-bench", "recipe": recipe.model_dump(mode="json"), "checkpoint_uri": (run_dir / "store").as_uri(),
            "workdir": str(run_dir / "work"), "status_path": str(run_dir / "work" / "status.json"), "max_steps": args.steps}
    run_dir.mkdir(parents=True)
    (run_dir / "job.json").write_text(json.dumps(spec))
    argv, extra = trainer_command(run_dir / "job.json", spec)
    env = {**os.environ, **extra, "LAUNCHPAD_HOME": str(work / "home"), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    log_path = run_dir / "train.log"
    t1 = time.monotonic()
    with SmiPoller() as smi, open(log_path, "w") as log:
        rc = subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=run_dir)
    wall = time.monotonic() - t1
    text = log_path.read_text()
    if rc != 0:
        print(text[-4000:], file=sys.stderr)
        print(f"trainer exited {rc} (log: {log_path})", file=sys.stderr)
        return 1

    tps = [float(m.group(2)) for m in re.finditer(r"^step (\d+)/\d+ .* tokens/s (\d+)", text, re.MULTILINE)
           if int(m.group(1)) > args.warmup]
    peak = re.search(r"peak GPU memory: ([\d.]+) GiB allocated, ([\d.]+) GiB reserved", text)
    shape = model_shape(str(model_dir))
    assert shape is not None, f"{model_dir} has no readable config.json"
    est = estimate_memory(shape, setup_from_recipe(recipe))
    est_gb = est.per_gpu_gb(1)
    smi_gib = smi.peak_mib / 1024 if smi.peak_mib else None
    result = {
        "recipe": args.recipe, "set": args.sets, "shape": args.shape, "params": shape.params, "device": (
            torch.cuda.get_device_name(0) if on_gpu else "cpu"),
        "steps": args.steps, "wall_s": round(wall, 1), "tokens_per_s_median": round(statistics.median(tps), 1) if tps else None,
        "tokens_per_step": recipe.sequence_len * recipe.micro_batch_size * recipe.gradient_accumulation_steps,
        "peak_allocated_gib": float(peak.group(1)) if peak else None,
        "peak_reserved_gib": float(peak.group(2)) if peak else None,
        "peak_nvidia_smi_gib": round(smi_gib, 2) if smi_gib else None,
        "planner_estimate_gib": round(est_gb, 2),
        # like for like (tests/planner/memory_refs.py): torch's allocated peak, torch's reserved, what the card needs
        "planner_allocated_gib": round(est.peak_allocated_gb(1), 2),
        "planner_reserved_gib": round(est.reserved_gb(1), 2),
        "planner_parts_gib": {k: round(v, 3) for k, v in est.parts.items()},
        "attention": next((line for line in text.splitlines() if line.startswith("attention:")), None),
        "environment": next((line for line in text.splitlines() if line.startswith("environment:")), None),
    }
    measured = result["peak_nvidia_smi_gib"] or result["peak_reserved_gib"]
    result["measured_over_estimate"] = round(measured / est_gb, 3) if measured else None
    for kind in ("allocated", "reserved"):  # the calibration table's ratio: estimate / measured
        got = result[f"peak_{kind}_gib"]
        result[f"estimate_over_{kind}"] = round(result[f"planner_{kind}_gib"] / got, 3) if got else None

    print(f"{result['device']}: {args.shape} ({shape.params / 1e9:.2f}B params), {args.steps} steps in {wall:.0f}s")
    print(f"  {result['attention']}")
    print(f"  tokens/s (median after {args.warmup} steps): {result['tokens_per_s_median']}")
    print(f"  peak memory: allocated {result['peak_allocated_gib']} GiB, reserved {result['peak_reserved_gib']} GiB, "
          f"nvidia-smi {result['peak_nvidia_smi_gib']} GiB")
    print(f"  planner estimate: {result['planner_estimate_gib']} GiB -> measured / estimate = {result['measured_over_estimate']}")
    print(f"  like for like, estimate / measured: allocated {result['planner_allocated_gib']} GiB -> "
          f"{result['estimate_over_allocated']}, reserved {result['planner_reserved_gib']} GiB -> "
          f"{result['estimate_over_reserved']}")
    if args.json_out == "-":
        json.dump(result, sys.stdout, indent=1)
        print()
    elif args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
