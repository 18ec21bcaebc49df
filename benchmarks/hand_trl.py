"""The baseline for `trainer_throughput.py --vs-hand`: recipes/smoke-lora.yaml written by hand as the TRL
SFTTrainer script a PyTorch engineer would write, with no launchpad in the training loop.

    python benchmarks/hand_trl.py --model DIR --data FILE.jsonl --steps 30 --optim adamw_8bit --out result.json

The same model files (launchpad's builtin tiny Llama, made beforehand), data, LoRA targets and every
TrainingArguments value that launchpad's trainer sets for that recipe (none left to a default that differs:
TRL defaults activation checkpointing on, launchpad's recipe has it off). Writes tokens seen (non-padding),
the seconds `trainer.train()` took, and the loss of each step.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--optim", default="adamw_torch")
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--report-to", default="none", help="none, or tensorboard: the event files launchpad writes too")
    args = ap.parse_args()

    import torch
    from datasets import load_dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, set_seed
    from trl import SFTConfig, SFTTrainer

    os.environ["TENSORBOARD_LOGGING_DIR"] = str(Path(args.workdir) / "runs")  # transformers 5's logging_dir
    set_seed(42)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, attn_implementation="sdpa", dtype=torch.float32)
    model.config.use_cache = False
    dataset = load_dataset("json", data_files=args.data, split="train")
    lora = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                      modules_to_save=["embed_tokens", "lm_head"], task_type="CAUSAL_LM")
    config = SFTConfig(
        output_dir=str(Path(args.workdir) / "out"),
        activation_checkpointing=False, gradient_checkpointing=False,
        per_device_train_batch_size=8, gradient_accumulation_steps=1, learning_rate=0.005, lr_scheduler_type="cosine",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, optim=args.optim, max_steps=args.steps, logging_steps=1,
        save_strategy="steps", save_steps=25, save_total_limit=2, seed=42, data_seed=42, max_length=128,
        packing=False, report_to=args.report_to, disable_tqdm=True,
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0, use_cpu=not torch.cuda.is_available(), bf16=torch.cuda.is_available(),
    )
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer, peft_config=lora)
    t0 = time.monotonic()
    trainer.train()
    took = time.monotonic() - t0
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    Path(args.out).write_text(json.dumps({"tokens": trainer.state.num_input_tokens_seen, "seconds": took,
                                          "losses": losses}))


if __name__ == "__main__":
    main()
