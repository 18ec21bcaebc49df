"""Sample packing against padding, on short chat samples: non-padding tokens per second of `launchpad up`;
with --vs-hand, `launchpad up` against the same job as a hand-written TRL script.

    python benchmarks/trainer_throughput.py [--rounds 3] [--steps 30] [--rows 2000] [--long-share 0.1]
    python benchmarks/trainer_throughput.py --flash-attention true   # on a GPU: FlashAttention's varlen packing
    python benchmarks/trainer_throughput.py --vs-hand [--rounds 5] [--steps 30]

--vs-hand: recipes/smoke-lora.yaml through `launchpad up` on `local` (CLI, agent, trainer, checkpoint
uploads) and benchmarks/hand_trl.py (the same model, data and TrainingArguments in a plain SFTTrainer
script), interleaved. The figure is launchpad / hand tokens per second of training (`trainer.train()`'s
time: launchpad's "finished at step" line, the script's own clock; goal >= 0.98x), and the two loss
curves must be the same run (the largest step-wise difference is printed).

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


def short_chats(path: Path, rows: int, seed: int = 0, long_share: float = 0.0) -> None:
    """Single-turn chats of 3 to 40 words each side: most far shorter than the longest in a batch. With
    `long_share`, that share of the rows has 120 to 180 words a side (a long tail, as real chat data has)."""
    rng = random.Random(seed)

    def text(low: int, high: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))

    with path.open("w") as f:
        for _ in range(rows):
            low, high = (120, 180) if rng.random() < long_share else (3, 40)
            f.write(json.dumps({"messages": [{"role": "user", "content": text(low, high)},
                                             {"role": "assistant", "content": text(low, high)}]}) + "\n")


def ideal_gain(path: Path, batch: int, sequence_len: int) -> tuple[float, float]:
    """(share of non-padding tokens in padded batches, the compute padding wastes as a ratio): the most
    packing can gain when the linear layers dominate. Batches as the trainer draws them: shuffled, in 8s."""
    sys.path.insert(0, str(REPO))
    from transformers import AutoTokenizer

    from launchpad.train.tiny import ensure_tiny_llama

    with tempfile.TemporaryDirectory() as tmp:
        tok = AutoTokenizer.from_pretrained(ensure_tiny_llama(Path(tmp)))
    lens = [min(len(tok(tok.apply_chat_template(json.loads(line)["messages"], tokenize=False)).input_ids), sequence_len)
            for line in path.open()]
    order = list(range(len(lens)))
    random.Random(0).shuffle(order)
    real = padded = 0
    for i in range(0, len(order) - batch + 1, batch):
        group = [lens[j] for j in order[i:i + batch]]
        real, padded = real + sum(group), padded + max(group) * batch
    return real / padded, padded / real


def up(home: Path, recipe: dict, steps: int) -> tuple[dict, str, float]:
    """Run `recipe` with `launchpad up` on `local` in its own home: (the last checkpoint's trainer_state.json,
    the job's log, the seconds of trainer.train() from its "finished at step N: N steps in S s" line)."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / f"{recipe['name']}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    env = {**os.environ, "LAUNCHPAD_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "launchpad", "up", str(path), "--json"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"launchpad up failed:\n{proc.stderr[-3000:]}")
    job = json.loads(proc.stdout)
    state = json.loads((home / "checkpoints" / job["id"] / f"checkpoint-{steps}" / "trainer_state.json").read_text())
    logs = subprocess.run([sys.executable, "-m", "launchpad", "logs", job["id"]], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120).stdout
    line = next(x for x in logs.splitlines() if x.startswith("finished at step"))  # "... 30 steps in 4.12s ..."
    return state, logs, float(line.split(" steps in ")[1].split("s")[0])


def run(home: Path, data: Path, packing: bool, steps: int, flash_attention: str = "auto") -> tuple[float, float]:
    """(non-padding tokens/s, final loss) of one `launchpad up`."""
    recipe = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    recipe.update(name=f"pack-{str(packing).lower()}", max_steps=steps, sequence_len=512, micro_batch_size=8,
                  sample_packing=packing, checkpoint={"every_steps": steps, "keep": 1},
                  flash_attention=yaml.safe_load(flash_attention))
    recipe["datasets"] = [{"path": str(data), "type": "chat"}]
    state, _, seconds = up(home, recipe, steps)
    losses = [h["loss"] for h in state["log_history"] if "loss" in h]
    return state["num_input_tokens_seen"] / seconds, statistics.fmean(losses[-5:])


def launchpad_smoke(home: Path, steps: int) -> tuple[float, list[float], str]:
    """(tokens/s, losses, optimizer) of recipes/smoke-lora.yaml through `launchpad up`."""
    recipe = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    recipe.update(max_steps=steps, autostop={"idle_minutes": 5})
    recipe["datasets"] = [{"path": str(REPO / "recipes" / "data" / "smoke-chat.jsonl"), "type": "chat"}]
    state, logs, seconds = up(home, recipe, steps)
    trained = next(x for x in logs.splitlines() if x.startswith("training ") and "optimizer " in x)
    optim = trained.split("optimizer ")[1].split(")")[0]  # "training N of M parameters (float32, optimizer X); ..."
    return state["num_input_tokens_seen"] / seconds, [h["loss"] for h in state["log_history"] if "loss" in h], optim


def hand_smoke(root: Path, model: Path, steps: int, optim: str, report_to: str = "none") -> tuple[float, list[float]]:
    out = root / "hand.json"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "hand_trl.py"), "--model", str(model), "--data",
                    str(REPO / "recipes" / "data" / "smoke-chat.jsonl"), "--steps", str(steps), "--optim", optim,
                    "--out", str(out), "--workdir", str(root), "--report-to", report_to],
                   check=True, capture_output=True, timeout=1800, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    r = json.loads(out.read_text())
    return r["tokens"] / r["seconds"], r["losses"]


def vs_hand(rounds: int, steps: int, report_to: str = "none") -> None:
    sys.path.insert(0, str(REPO))
    from launchpad.train.tiny import ensure_tiny_llama

    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = ensure_tiny_llama(root / "model")
        optim = launchpad_smoke(root / "warm-up", 5)[2]  # the optimizer launchpad picks, and warm caches
        for i in range(rounds):
            # alternate which goes first, so that neither always runs on a machine the other just warmed
            if i % 2:
                hand, hand_losses = hand_smoke(root / f"hand-{i}", model, steps, optim, report_to)
                lp, lp_losses, optim = launchpad_smoke(root / f"lp-{i}", steps)
            else:
                lp, lp_losses, optim = launchpad_smoke(root / f"lp-{i}", steps)
                hand, hand_losses = hand_smoke(root / f"hand-{i}", model, steps, optim, report_to)
            ratios.append(lp / hand)
            if len(lp_losses) != len(hand_losses):
                raise SystemExit(f"not the same run: {len(lp_losses)} logged steps against {len(hand_losses)}")
            gap = max(abs(a - b) for a, b in zip(lp_losses, hand_losses, strict=True))
            print(f"round {i + 1}: launchpad up {lp:,.0f} tok/s, hand-written TRL {hand:,.0f} tok/s: {ratios[-1]:.3f}x "
                  f"(optimizer {optim}; largest loss difference over {len(lp_losses)} steps {gap:.2g})")
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 4 else [min(ratios), 0, max(ratios)]
    print(f"launchpad up / hand-written SFTTrainer, tokens/s of training: {statistics.median(ratios):.3f}x "
          f"(median of {len(ratios)}, quartiles {q[0]:.3f}-{q[2]:.3f}; goal >= 0.98x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--long-share", type=float, default=0.0,
                    help="share of long rows (120-180 words a side) among the short ones: a long-tailed length mix")
    ap.add_argument("--vs-hand", action="store_true", help="launchpad up against a hand-written TRL script")
    ap.add_argument("--hand-report-to", default="none", choices=["none", "tensorboard"],
                    help="--vs-hand: the script's report_to (launchpad always writes TensorBoard event files)")
    ap.add_argument("--flash-attention", default="auto", choices=["auto", "true", "false"],
                    help="the recipes' flash_attention (true on a GPU without flash-attn: PyTorch's own varlen kernel)")
    args = ap.parse_args()
    if args.vs_hand:
        vs_hand(args.rounds, args.steps, args.hand_report_to)
        return
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data = root / "short.jsonl"
        short_chats(data, args.rows, long_share=args.long_share)
        share, ideal = ideal_gain(data, 8, 512)
        print(f"data: padded batches of 8 are {share:.0%} non-padding: packing can gain at most {ideal:.2f}x "
              "where the linear layers dominate (attention over packed rows costs more)")
        for i in range(args.rounds):
            padded = run(root / f"pad-{i}", data, False, args.steps, args.flash_attention)
            packed = run(root / f"pack-{i}", data, True, args.steps, args.flash_attention)
            ratios.append(packed[0] / padded[0])
            print(f"round {i + 1}: padded {padded[0]:,.0f} tok/s (loss {padded[1]:.3f}), packed {packed[0]:,.0f} tok/s "
                  f"(loss {packed[1]:.3f}): {ratios[-1]:.2f}x")
    print(f"sample packing / padding, non-padding tokens/s: {statistics.median(ratios):.2f}x "
          f"(median of {len(ratios)}; goal >= 2x)")

if __name__ == "__main__":
    main()
