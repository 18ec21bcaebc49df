"""`launchpad validate` end to end, in a subprocess: exit 0 on a good recipe; exit 2 with one line per
problem on stderr, each naming the file, and never a traceback."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

GOOD = """\
name: cli-run
base_model: builtin:tiny-llama
datasets:
  - path: data/train.jsonl
max_steps: 5
"""

# (id, file content, fields the problem lines must name, in order)
BAD = [
    ("empty", b"", [""]),
    ("binary", bytes(range(128, 256)) * 4, ["line 1"]),
    ("yaml-syntax", b"name: x\nbase_model: [a\nlr: : 1\n", ["line 3"]),
    ("not-a-mapping", b"- a\n- b\n", [""]),
    ("alias-bomb", ("a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{c}: &{c} [{','.join([f'*{p}'] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))).encode(), ["d"]),
    ("duplicate-key", (GOOD + "max_steps: 6\n").encode(), ["max_steps"]),
    ("shell-name", GOOD.replace("cli-run", '"x; rm -rf /"').encode(), ["name"]),
    ("several", (GOOD + "learnin_rate: 1\nresources:\n  gpu: 'A100:x'\n  max_price: -2\nlearning_rate: -0.1\n").encode(),
     ["learning_rate", "resources.gpu", "resources.max_price", "learnin_rate"]),
]


def run_validate(path: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "launchpad", "validate", path], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "recipes" / "data").mkdir(parents=True)
    (tmp_path / "recipes" / "data" / "train.jsonl").write_text('{"messages": []}\n')
    return tmp_path


def test_good_recipe_exits_0(project):
    (project / "recipes" / "good.yaml").write_text(GOOD)
    result = run_validate("recipes/good.yaml", project)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("content, fields", [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_recipe_exits_2_with_one_line_per_problem(project, content, fields):
    (project / "recipes" / "bad.yaml").write_bytes(content)
    result = run_validate("recipes/bad.yaml", project)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "Traceback" not in output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == len(fields), lines
    for line, field in zip(lines, fields, strict=True):
        assert line.startswith(f"recipes/bad.yaml: {field}"), line


def test_missing_file_exits_2(project):
    result = run_validate("recipes/nope.yaml", project)
    assert result.returncode == 2
    assert "Traceback" not in result.stdout + result.stderr
    assert "recipes/nope.yaml" in result.stderr
