"""A base model without a chat template meets chat data: a recipe error at `plan`/`up`, before any machine
boots (launchpad.planner.model_files), read from a local model folder or, through the real CLI, from a
loopback double of the Hub's file endpoint (`HF_ENDPOINT`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from launchpad.errors import RecipeError
from launchpad.planner.model_files import has_chat_template
from launchpad.planner.need import need_from_recipe

REPO = Path(__file__).resolve().parents[2]
CONFIG = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1024}
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def model_dir(tmp_path: Path, name: str, tokenizer_config: dict | None, *, jinja: bool = False) -> Path:
    path = tmp_path / name
    path.mkdir()
    (path / "config.json").write_text(json.dumps(CONFIG))
    if tokenizer_config is not None:
        (path / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    if jinja:
        (path / "chat_template.jinja").write_text(TEMPLATE)
    return path


def test_a_local_base_model_without_a_template_and_chat_data_is_a_recipe_error(write_recipe, tmp_path) -> None:
    base = model_dir(tmp_path, "base", {"model_max_length": 2048})
    with pytest.raises(RecipeError) as e:
        need_from_recipe(write_recipe(base_model=str(base), adapter="lora"))
    line = str(e.value)
    assert "chat_template:" in line and "has no chat template" in line and "datasets[0] is alpaca data" in line
    assert "set chat_template: chatml" in line
    # the fixes it names work: a named template, or data that needs none
    assert need_from_recipe(write_recipe(base_model=str(base), adapter="lora", chat_template="chatml")).vram_gb
    (tmp_path / "data.jsonl").write_text('{"text": "plain text"}\n')
    completion = [{"path": "data.jsonl", "type": "completion"}]
    assert need_from_recipe(write_recipe(base_model=str(base), adapter="lora", datasets=completion)).vram_gb


def test_what_counts_as_having_a_template(tmp_path, monkeypatch) -> None:
    assert has_chat_template(str(model_dir(tmp_path, "key", {"chat_template": TEMPLATE}))) is True
    assert has_chat_template(str(model_dir(tmp_path, "jinja", {}, jinja=True))) is True  # transformers >= 4.50
    assert has_chat_template(str(model_dir(tmp_path, "none", {}))) is False
    assert has_chat_template(str(model_dir(tmp_path, "no-tokenizer", None))) is None  # it may live elsewhere
    assert has_chat_template("builtin:tiny-llama") is True
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert has_chat_template("someorg/not-cached-anywhere") is None  # offline and not cached: cannot tell


class _Hub(BaseHTTPRequestHandler):
    """GET /{org}/{name}/resolve/main/{file}: the files in `files`, else 404 (as the Hub does)."""

    files: dict[str, str] = {}
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        self.seen.append(self.path)
        parts = self.path.split("/")
        body = self.files.get(f"{parts[1]}/{parts[2]}/{parts[-1]}") if len(parts) >= 6 else None
        self.send_response(200 if body is not None else 404)
        data = (body or "Entry not found").encode()
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("repo, files, code", [
    ("acme/base-8b", {"tokenizer_config.json": "{}"}, 2),
    ("acme/instruct-8b", {"tokenizer_config.json": "{}", "chat_template.jinja": TEMPLATE}, 0),
])
def test_plan_reads_the_hub_s_tokenizer_files(repo, files, code, tmp_path) -> None:
    _Hub.files = {f"{repo}/config.json": json.dumps(CONFIG), **{f"{repo}/{k}": v for k, v in files.items()}}
    _Hub.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (tmp_path / "data.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
        recipe = tmp_path / "r.yaml"
        recipe.write_text(yaml.safe_dump({"name": "hub", "base_model": repo, "adapter": "lora", "max_steps": 5,
                                          "datasets": [{"path": "data.jsonl", "type": "chat"}]}))
        env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_TOKEN")}
        env.update(HF_ENDPOINT=f"http://127.0.0.1:{server.server_port}", HF_HUB_CACHE=str(tmp_path / "hf"),
                   LAUNCHPAD_HOME=str(tmp_path / "home"))
        plan = [sys.executable, "-m", "launchpad", "plan", str(recipe), "--json"]
        proc = subprocess.run(plan, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
        assert proc.returncode == code, proc.stderr
        if code:
            assert proc.stderr.count("\n") == 1 and f"{repo}'s tokenizer has no chat template" in proc.stderr
        asked = len(_Hub.seen)
        again = subprocess.run(plan, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
        assert again.returncode == code and len(_Hub.seen) == asked  # read once: the second plan asks nothing
    finally:
        server.shutdown()
