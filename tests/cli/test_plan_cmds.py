"""`launchpad plan` and `launchpad offers`, run as a user runs them (a subprocess, isolated home)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]

QLORA_8B = {
    "name": "qlora-8b", "base_model": "meta-llama/Meta-Llama-3-8B", "adapter": "qlora",
    "datasets": [{"path": "tatsu-lab/alpaca", "type": "alpaca"}], "sequence_len": 2048, "micro_batch_size": 4,
    "gradient_accumulation_steps": 8, "num_epochs": 3, "gradient_checkpointing": True, "lora_r": 64,
    "lora_alpha": 16, "lora_target_modules": ["q_proj", "v_proj"], "resources": {"gpu": "24GB.."},
}


def write(tmp_path: Path, data: dict) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_plan_explain_on_a_fresh_home_is_fast_and_shows_every_cloud(run_cli, tmp_path: Path) -> None:
    recipe = write(tmp_path, QLORA_8B)
    t0 = time.perf_counter()
    proc = run_cli("plan", recipe, "--explain")
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 1, proc.stderr  # issue 9 item 2: nothing configured can run it -> exit 1
    out = proc.stdout
    assert "VRAM per GPU" in out
    assert "No configured provider can run this recipe" in out  # only `local` is configured, and it has no GPU
    assert "also possible with a provider you have not configured" in out  # the table is still printed
    assert "Host need per node (1 GPU)" in out and "bf16 weights" in out  # item 4: the host need, explained
    assert "why it would win" in out and "storage I/O" in out and "est. cost" in out
    assert "most common rejection reasons" in out and "not configured" in out
    assert elapsed < 2.0, f"plan --explain took {elapsed:.2f}s"


def test_plan_json(run_cli, tmp_path: Path) -> None:
    proc = run_cli("plan", write(tmp_path, QLORA_8B), "--json")
    assert proc.returncode == 1, proc.stderr  # nothing configured can run it; the JSON still says why
    data = json.loads(proc.stdout)
    assert data["offers"] == []
    assert data["need"]["vram_gb_per_gpu"] > 10
    clouds = {r["provider"] for r in data["rejected"]}
    assert clouds >= {"aws", "gcp", "azure", "lambda", "vast", "fluidstack", "paperspace", "local"}
    costs = [u["est_cost"] for u in data["unconfigured"]]
    assert costs and costs[0] <= costs[-1] * 1.02
    assert all(not u["configured"] for u in data["unconfigured"])
    # --provider keeps only that provider, --top trims the lists
    data = json.loads(run_cli("plan", write(tmp_path, QLORA_8B), "--json", "--provider", "lambda", "--top", "3").stdout)
    assert {r["provider"] for r in data["rejected"]} == {"lambda"} and len(data["unconfigured"]) == 3


def test_plan_smoke_recipe_picks_local(run_cli) -> None:
    proc = run_cli("plan", str(REPO / "recipes" / "smoke-lora.yaml"), "--json", "--minimize", "time")
    assert proc.returncode == 0, proc.stderr
    best = json.loads(proc.stdout)["offers"][0]
    assert (best["provider"], best["price_per_hour"], best["configured"]) == ("local", 0.0, True)
    table = run_cli("plan", str(REPO / "recipes" / "smoke-lora.yaml"))
    assert table.returncode == 0 and "local" in table.stdout and "--explain for more" in table.stdout


def test_plan_bad_input(run_cli, tmp_path: Path) -> None:
    proc = run_cli("plan", write(tmp_path, {**QLORA_8B, "resources": {"gpu": "A100:0"}}))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    proc = run_cli("plan", write(tmp_path, QLORA_8B), "--minimize", "vibes")
    assert proc.returncode == 2


def test_offers_json_cheapest_first_with_configured_field(run_cli) -> None:
    proc = run_cli("offers", "--gpu", "H100:8", "--spot", "--json")
    assert proc.returncode == 0, proc.stderr
    offers = json.loads(proc.stdout)["offers"]
    assert offers and all(o["gpu"] == "H100" and o["gpu_count"] == 8 and o["spot"] for o in offers)
    prices = [o["price_per_hour"] for o in offers]
    assert prices == sorted(prices)
    assert {"gcp", "aws", "azure"} <= {o["provider"] for o in offers}
    assert all(o["configured"] is False for o in offers)
    eu = json.loads(run_cli("offers", "--gpu", "A100", "--region", "europe-*", "--json").stdout)["offers"]
    assert eu and all(o["region"].startswith("europe-") for o in eu)


def test_offers_table_and_bad_spec(run_cli) -> None:
    proc = run_cli("offers", "--gpu", "A100:80GB:1", "--limit", "3")
    assert proc.returncode == 0 and "1xA100 80G" in proc.stdout and "showing the cheapest 3" in proc.stdout
    bad = run_cli("offers", "--gpu", "A100:zero")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
