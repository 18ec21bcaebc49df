"""Where model shapes come from: the bundled table (every model of Axolotl's examples), and the Hub through
huggingface_hub's own HTTP client against a loopback double of its `resolve` endpoint."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from launchpad.planner.shapes import bundled_shapes, try_shape

REPO = Path(__file__).resolve().parents[2]
AXOLOTL = REPO / "tests" / "data" / "axolotl" / "examples"
# Not in the table (their config.json was not found in public copies, or only in part): sized by one download
NEEDS_A_DOWNLOAD = {
    "PaddlePaddle/PaddleOCR-VL-1.6", "Qwen/Qwen3.5-122B-A10B", "ai21labs/AI21-Jamba-1.5-Large",
    "arcee-ai/Trinity-Nano-Preview", "axolotl-ai-co/Falcon-E-1.2-3B-Exp-prequantized",
    "axolotl-ai-co/Mistral-Medium-3.5-128B-BF16", "mistralai/Voxtral-Mini-3B-2507",
    "tiiuae/Falcon-E-3B-Base-prequantized",
}
LLAMA_CONFIG = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                "tie_word_embeddings": False}


def axolotl_models() -> set[str]:
    models = set()
    for f in AXOLOTL.rglob("*.y*ml"):
        data = yaml.safe_load(f.read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("base_model"), str):
            models.add(data["base_model"])
    return models


def test_every_axolotl_example_model_is_sized_offline_or_by_one_download(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    models = axolotl_models()
    assert len(models) >= 140
    unsized = {m for m in models if try_shape(m) is None}
    assert unsized == NEEDS_A_DOWNLOAD
    assert all(re.fullmatch(r"[\w.-]+/[\w.-]+", m) for m in unsized)  # Hub ids: their config.json downloads


@pytest.mark.parametrize("model,billions", [
    ("NousResearch/Meta-Llama-3.1-8B", 8.03), ("mistralai/Mixtral-8x7B-v0.1", 46.7),
    ("mistral-community/Mixtral-8x22B-v0.1", 141), ("Qwen/Qwen3-30B-A3B-Instruct-2507", 30.5),
    ("deepseek-ai/DeepSeek-V2-Lite", 15.7), ("microsoft/phi-2", 2.78), ("EleutherAI/pythia-12b-deduped", 11.85),
    ("tiiuae/falcon-7b", 6.92), ("google/gemma-2-9b", 9.24), ("openai/gpt-oss-20b", 20.9),
    ("ai21labs/Jamba-v0.1", 51.6), ("state-spaces/mamba-2.8b", 2.77), ("Qwen/Qwen-7B", 7.72),
    ("hugging-quants/Meta-Llama-3.1-405B-BNB-NF4-BF16", 405.9), ("cerebras/btlm-3b-8k-base", 2.6),
    ("arcee-ai/AFM-4.5B", 4.6), ("bigscience/mt0-xxl", 12.9), ("bigscience/bloomz-7b1", 7.07),
])
def test_published_totals(model: str, billions: float, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    shape = try_shape(model)
    assert shape is not None and shape.params / 1e9 == pytest.approx(billions, rel=0.03)


def test_every_table_entry_parses_and_says_where_it_came_from() -> None:
    for key, entry in bundled_shapes().items():
        assert entry.get("source"), key
        assert try_shape(key) is not None, key


class _Hub(BaseHTTPRequestHandler):
    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        _Hub.seen.append((self.path, self.headers.get("Authorization", "")))
        if self.path == "/acme/llama-ish/resolve/main/config.json":
            body = json.dumps(LLAMA_CONFIG).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif self.path.startswith("/acme/gated/"):
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture()
def hub():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Hub.seen.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}", server
    server.shutdown()


def _plan(tmp_path: Path, model: str, endpoint: str, **env: str) -> subprocess.CompletedProcess:
    recipe = tmp_path / f"{model.split('/')[-1]}.yaml"
    recipe.write_text(yaml.safe_dump({
        "name": "hub-shape", "base_model": model, "adapter": "qlora", "max_steps": 10,
        "datasets": [{"path": "tatsu-lab/alpaca", "type": "alpaca"}]}))
    full_env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}
    full_env.update({"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf"),
                     "LAUNCHPAD_HOME": str(tmp_path / "home"), **env})
    return subprocess.run([sys.executable, "-m", "launchpad", "plan", str(recipe), "--json"], capture_output=True,
                          text=True, env=full_env, cwd=REPO, timeout=120)


def test_a_model_outside_the_table_is_sized_from_its_hub_config_once(tmp_path, hub) -> None:
    endpoint, server = hub
    proc = _plan(tmp_path, "acme/llama-ish", endpoint, HF_TOKEN="hf_secret_for_the_double")
    assert proc.returncode in (0, 1), proc.stderr  # 1: no provider configured here can run it
    need = json.loads(proc.stdout)["need"]
    assert need["params"] == pytest.approx(8.03e9, rel=0.005)
    assert ("/acme/llama-ish/resolve/main/config.json", "Bearer hf_secret_for_the_double") in _Hub.seen
    assert "hf_secret" not in proc.stdout + proc.stderr  # the token is sent, never printed or stored
    cached = tmp_path / "home" / "cache" / "model-configs" / "acme--llama-ish.json"
    assert json.loads(cached.read_text()) == LLAMA_CONFIG and "hf_secret" not in cached.read_text()
    server.shutdown()  # the Hub goes away: the cached copy is enough
    again = _plan(tmp_path, "acme/llama-ish", endpoint)
    assert again.returncode in (0, 1) and json.loads(again.stdout)["need"]["params"] == need["params"], again.stderr


def test_a_gated_or_missing_model_is_exit_2_with_the_fix(tmp_path, hub) -> None:
    endpoint, _ = hub
    gated = _plan(tmp_path, "acme/gated", endpoint)
    assert gated.returncode == 2 and "the Hub answered 401" in gated.stderr and "set HF_TOKEN" in gated.stderr
    assert "base_model_config" in gated.stderr and len(gated.stderr.strip().splitlines()) == 1
    missing = _plan(tmp_path, "acme/nothing", endpoint)
    assert missing.returncode == 2 and "the Hub answered 404" in missing.stderr
    offline = _plan(tmp_path, "acme/nothing", endpoint, HF_HUB_OFFLINE="1")
    assert offline.returncode == 2 and "HF_HUB_OFFLINE is set" in offline.stderr
