"""Checkpoint stall: training wall time with the agent's asynchronous upload vs no upload at all,
and vs uploading inside the trainer (what a hand-rolled script does).

    python benchmarks/checkpoint_stall.py [--steps 60] [--every 10] [--store file|s3]

All three runs train the same full fine-tune of a small random-init Llama (~4 M parameters, so each
checkpoint with its optimizer state is tens of MB) in the same process tree, one after another:
  baseline  the trainer saves checkpoint-N folders and hands them to a queue nobody uploads from
  async     the same, with the agent's AsyncUploader uploading while training goes on
  inline    the trainer uploads each checkpoint before it continues (launchpad's no-agent mode)
The wall time is the trainer's own "N steps in X s" (model loading excluded). Goal: async <= 1.02x baseline.
On a GPU machine training runs on the GPU and the uploader only uses spare CPU. To model that on a CPU
machine the trainer gets `--trainer-threads` cores (default: all but one), leaving the rest to the
uploader and the store; `--trainer-threads 0` lets training take every core, so any upload work
(hashing, copying, moto's own CPU for s3) comes straight out of training time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


def build_model(dest: Path) -> Path:
    """A ~4 M parameter Llama sharing the builtin tiny tokenizer."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from launchpad.train.tiny import ensure_tiny_llama

    tiny = ensure_tiny_llama(dest / "cache")
    tok = AutoTokenizer.from_pretrained(tiny)
    import torch

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                      num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=512,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model_dir = dest / "bench-llama"
    LlamaForCausalLM(cfg).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    return model_dir


def spec_for(root: Path, model_dir: Path, store_uri: str, steps: int, every: int, name: str) -> Path:
    import yaml

    from launchpad.recipe import load_recipe

    recipe = {
        "name": f"stall-{name}", "base_model": str(model_dir), "adapter": "full",
        "datasets": [{"path": str(REPO / "recipes" / "data" / "smoke-chat.jsonl"), "type": "chat"}],
        "sequence_len": 128, "micro_batch_size": 4, "learning_rate": 1e-3, "max_steps": steps,
        "logging_steps": 5, "checkpoint": {"every_steps": every, "keep": 2},
    }
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    work = root / name
    work.mkdir()
    spec = {"job_id": f"stall-{name}", "recipe": load_recipe(path).model_dump(mode="json"),
            "checkpoint_uri": store_uri, "workdir": str(work), "status_path": str(work / "status.json")}
    (work / "job.json").write_text(json.dumps(spec))
    return work / "job.json"


THREADS: dict[str, str] = {}


def train(spec: Path, env: dict[str, str]) -> float:
    proc = subprocess.run([sys.executable, "-m", "launchpad.train", "--spec", str(spec)], capture_output=True,
                          text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", **THREADS, **env})
    if proc.returncode != 0:
        sys.exit(f"trainer failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    m = re.search(r"(\d+) steps in ([\d.]+)s", proc.stdout)
    if m is None:
        sys.exit(f"trainer printed no timing line:\n{proc.stdout[-2000:]}")
    return float(m.group(2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--store", choices=["file", "s3"], default="file")
    ap.add_argument("--trainer-threads", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    args = ap.parse_args()
    if args.trainer_threads:
        THREADS.update(OMP_NUM_THREADS=str(args.trainer_threads), MKL_NUM_THREADS=str(args.trainer_threads))
    root = Path(tempfile.mkdtemp(prefix="lp-stall-"))
    server = None
    try:
        os.environ["LAUNCHPAD_HOME"] = str(root / "home")
        model_dir = build_model(root)
        if args.store == "s3":
            import boto3
            from _moto import MotoServer

            server = MotoServer()
            boto3.client("s3").create_bucket(Bucket="ckpt")
            store_uri = "s3://ckpt/runs"
        else:
            store_uri = (root / "store").as_uri()

        from launchpad.agent.uploader import AsyncUploader
        from launchpad.storage import open_store

        times = {}
        # baseline: checkpoints saved and handed over; nobody uploads
        times["baseline"] = train(spec_for(root, model_dir, store_uri, args.steps, args.every, "baseline"),
                                  {"LAUNCHPAD_AGENT_UPLOAD_QUEUE": str(root / "queue-baseline")})
        # async: the agent's uploader runs beside the trainer
        queue = root / "queue-async"
        up = AsyncUploader(open_store(store_uri), "stall-async", queue, keep=2, recipe_hash=None,
                           on_uploaded=lambda r: None, log=lambda m: None).start()
        times["async"] = train(spec_for(root, model_dir, store_uri, args.steps, args.every, "async"),
                               {"LAUNCHPAD_AGENT_UPLOAD_QUEUE": str(queue)})
        up.drain()
        # inline: the trainer uploads each checkpoint itself before going on
        times["inline"] = train(spec_for(root, model_dir, store_uri, args.steps, args.every, "inline"), {})
        ckpt_mb = sum(f.stat().st_size for f in (root / "queue-baseline").glob("checkpoint-*/*")) / 2**20
        n = len(list((root / "queue-baseline").glob("checkpoint-*")))
        print(f"{args.steps} steps, a checkpoint every {args.every} ({n} checkpoints, {ckpt_mb / max(n, 1):.0f} MB each), "
              f"store {args.store}, trainer threads {args.trainer_threads or 'all'} of {os.cpu_count()} cores")
        for name, t in times.items():
            print(f"  {name:<8} {t:7.2f} s   {t / times['baseline']:.3f}x baseline")
        print(f"async upload stall: {100 * (times['async'] / times['baseline'] - 1):+.1f}% (goal <= +2%)")
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
