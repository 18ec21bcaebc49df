"""Sample packing against padding, on short chat samples: non-padding tokens per second of `launchpad up`.

    python benchmarks/trainer_throughput.py [--rounds 3] [--steps 30] [--rows 2000]

Each round runs the same recipe twice on the embedded `local` provider (the real CLI, agent and trainer,
the tiny random Llama), once with `sample_packing: false` (the baseline: each micro-batch padded to its
longest sample) and once with `sample_packing: true`, interleaved so that the machine's noise falls on
both. The figure is packed / padded non-padding tokens per second (goal >= 2x on short samples), from
the trainer's own count (`num_input_tokens_seen`, non-padding; the final checkpoint's trainer_state.json)
over its training time (the trainer's "finished at step N: N steps in S s" line). The loss each run ends
at is printed beside it: packing sees more samples per step, so its loss at the same step must not be
worse (no sample attends to another: tests/train/test_packing.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent

WORDS = ("the a cat dog runs sits blue red small large quick slow sun moon river tree city road book "
         "light day night water fire stone green old new bright").split()


def short_chats(path: Path, rows: int, seed: int = 0) -> None:
    """Single-turn chats of 3 to 40 words each side: most far shorter than the longest in a batch."""
    rng = random.Random(seed)

    def text() -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 40)))

    with path.open("w") as f:
        for _ in range(rows):
            f.write(json.dumps({"messages": [{"role": "user", "content": text()},
                                             {"role": "assistant", "content": text()}]}) + "\n")


def run(home: Path, data: Path, packing: bool, steps: int) -> tuple[float, float]:
    """(non-padding tokens/s, final loss) of one `launchpad up`."""
    recipe = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    recipe.update(name=f"pack-{str(packing).lower()}", max_steps=steps, sequence_len=512, micro_batch_size=8,
                  sample_packing=packing, checkpoint={"every_steps": steps, "keep": 1})
    recipe["datasets"] = [{"path": str(data), "type": "chat"}]
    home.mkdir(parents=True, exist_ok=True)
    path = home / f"{recipe['name']}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    env = {**os.environ, "LAUNCHPAD_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "launchpad", "up", str(path), "--json"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"launchpad up failed:\n{proc.stderr[-3000:]}")
    job = json.loads(proc.stdout)
    state_file = home / "checkpoints" / job["id"] / f"checkpoint-{steps}" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    losses = [h["loss"] for h in state["log_history"] if "loss" in h]
    logs = subprocess.run([sys.executable, "-m", "launchpad", "logs", job["id"]], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120).stdout
    line = next(x for x in logs.splitlines() if x.startswith("finished at step"))  # "... 30 steps in 4.1s ..."
    seconds = float(line.split(" steps in ")[1].split("s")[0])
    return state["num_input_tokens_seen"] / seconds, statistics.fmean(losses[-5:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rows", type=int, default=2000)
    args = ap.parse_args()
    ratios, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = root / "short.jsonl"
        short_chats(data, args.rows)
        for i in range(args.rounds):
            padded = run(root / f"pad-{i}", data, False, args.steps)
            packed = run(root / f"pack-{i}", data, True, args.steps)
            ratios.append(packed[0] / padded[0])
            rows.append((padded, packed))
            print(f"round {i + 1}: padded {padded[0]:,.0f} tok/s (loss {padded[1]:.3f}), packed {packed[0]:,.0f} tok/s "
                  f"(loss {packed[1]:.3f}): {ratios[-1]:.2f}x")
    print(f"sample packing / padding, non-padding tokens/s: {statistics.median(ratios):.2f}x "
          f"(median of {len(ratios)}; goal >= 2x)")


if __name__ == "__main__":
    main()
