"""`launchpad up RECIPE --smoke` (10 steps end to end on the local provider) of the QLoRA recipe, then
`launchpad export JOB`: a standard HF model folder that `AutoModelForCausalLM.from_pretrained` loads and
generates with, whose logits equal the PEFT model's (adapter on the full-precision base)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def export_cli(run_cli, launchpad_home, *args: str) -> subprocess.CompletedProcess:
    """`launchpad export` once the CLI registers it; until then the same click command directly."""
    from launchpad.cli import cli

    if "export" in cli.commands:
        return run_cli("export", *args, timeout=180)
    code = ("import sys; from launchpad.cli import cli, main; from launchpad.cli.export_cmd import export; "
            "cli.add_command(export); main(['export', *sys.argv[1:]])")
    env = {**os.environ, "LAUNCHPAD_HOME": str(launchpad_home), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=180, env=env, cwd=REPO)


def test_smoke_qlora_then_export_a_merged_model(run_cli, launchpad_home, tmp_path):
    pytest.importorskip("bitsandbytes")
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = yaml.safe_load((REPO / "recipes" / "smoke-qlora.yaml").read_text())
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    data["name"] = "export-qlora"
    recipe = tmp_path / "export-qlora.yaml"
    recipe.write_text(yaml.safe_dump(data))

    proc = run_cli("up", str(recipe), "--smoke", "--json", timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job = json.loads(proc.stdout)
    assert job["state"] == "SUCCEEDED" and job["step"] == 10  # --smoke: max_steps 10 wins over the recipe's 100

    out = tmp_path / "merged"
    proc = export_cli(run_cli, launchpad_home, job["id"], "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    assert result["merged_adapter"] is True and result["step"] == 10 and result["path"] == str(out)
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {p.name for p in out.iterdir()}
    assert not (out / "adapter_config.json").exists()
    assert json.loads((out / "config.json").read_text())["use_cache"] is True

    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                           add_generation_prompt=True, tokenize=False)
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    generated = merged.generate(ids, max_new_tokens=1, do_sample=False)
    assert generated.shape[1] == ids.shape[1] + 1

    # The same numbers as the adapter applied by PEFT to the full-precision base.
    from launchpad.storage import open_store
    from launchpad.storage.checkpoints import download_checkpoint, latest_checkpoint
    from launchpad.train.tiny import ensure_tiny_llama

    store = open_store(result["checkpoint"].rsplit("/", 2)[0])
    ckpt = download_checkpoint(store, latest_checkpoint(store, job["id"]), tmp_path / "ckpt")
    base = AutoModelForCausalLM.from_pretrained(ensure_tiny_llama(tmp_path))
    peft_model = PeftModel.from_pretrained(base, str(ckpt)).eval()
    with torch.no_grad():
        a, b = merged(ids).logits, peft_model(ids).logits
    assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()
    assert a[0, -1].argmax() == generated[0, -1]

    proc = export_cli(run_cli, launchpad_home, job["id"], "--step", "7", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "no checkpoint-7" in proc.stdout + proc.stderr
