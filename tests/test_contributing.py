"""CONTRIBUTING.md's "Add a provider" example is real: built from the page's own snippets, installed as a
distribution (a dist-info with the entry point on PYTHONPATH), listed by `launchpad check`, and passing
the conformance suite in a separate pytest run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"^```\w+ file=(?P<path>\S+)\n(?P<body>.*?)^```$", re.S | re.M)


def snippets() -> dict[str, str]:
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    return {m["path"]: m["body"] for m in _BLOCK.finditer(text)}


def build_example(root: Path) -> dict[str, str]:
    """Write the page's files under `root` and 'install' the distribution its pyproject describes."""
    files = snippets()
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
    tomllib = pytest.importorskip("tomllib", reason="reads the page's pyproject.toml with tomllib (Python 3.11+)")

    project = tomllib.loads(files["providers/toycloud/pyproject.toml"])["project"]
    pkg_root = root / "providers" / "toycloud"
    dist = pkg_root / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    eps = "".join(f"{k} = {v}\n" for k, v in project["entry-points"]["launchpad"].items())
    (dist / "entry_points.txt").write_text("[launchpad]\n" + eps)
    return {"PYTHONPATH": os.pathsep.join([str(pkg_root), os.environ.get("PYTHONPATH", "")])}


def test_the_page_has_the_files_it_names():
    assert set(snippets()) == {"providers/toycloud/pyproject.toml", "providers/toycloud/launchpad_toycloud/__init__.py",
                               "providers/toycloud/tests/test_toycloud.py"}


def test_example_provider_is_listed_by_check(tmp_path, run_cli):
    env = build_example(tmp_path)
    rows = {r["provider"]: r for r in json.loads(run_cli("check", "--json", env=env, check=False).stdout)["providers"]}
    assert rows["toycloud"]["usable"] is False and "api_dir" in rows["toycloud"]["reason"]
    assert rows["toycloud"]["plugin"] == "launchpad-toycloud 0.1.0"


@pytest.mark.sshd  # the suite runs in a child pytest against launchpad_sshd
def test_example_provider_passes_the_conformance_suite(tmp_path):
    env = {**os.environ, **build_example(tmp_path)}
    test_file = tmp_path / "providers" / "toycloud" / "tests" / "test_toycloud.py"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert re.search(r"\b(\d+) passed\b", proc.stdout) and int(re.search(r"(\d+) passed", proc.stdout)[1]) >= 9


def test_provider_kit_is_importable_from_launchpad():
    import launchpad

    for name in ("hookimpl", "Provider", "VMProvider", "Offer", "Instance", "InstanceSpec", "NoCapacity", "JobSpec"):
        assert name in launchpad.__all__ and getattr(launchpad, name) is not None
    code = "import launchpad, sys; print(sorted(m for m in sys.modules if m.startswith(('paramiko', 'torch', 'boto3'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
