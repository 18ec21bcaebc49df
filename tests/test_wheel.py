"""launchpad.wheel: a wheel of the running code, reproducible and cached by content hash."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from launchpad.wheel import build_wheel, package_files


def _pkg(tmp_path: Path) -> Path:
    pkg = tmp_path / "src" / "launchpad"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '0.1.0'\n")
    (pkg / "sub" / "mod.py").write_text("X = 1\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "junk.cpython-311.pyc").write_bytes(b"\0")
    (pkg / ".editor.py.tmp").write_text("half-saved")
    (pkg / "data.txt").write_text("package data\n")
    return pkg


def test_the_running_package_builds_once_per_content(tmp_path):
    first = build_wheel(tmp_path)
    assert first.name.startswith("launchpad-") and "+g" in first.name and first.name.endswith("-py3-none-any.whl")
    mtime = first.stat().st_mtime_ns
    assert build_wheel(tmp_path) == first and first.stat().st_mtime_ns == mtime  # cached: not rebuilt
    with zipfile.ZipFile(first) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith("/METADATA"))).decode()
        assert any(n.endswith("/RECORD") for n in names)
    assert "launchpad/ssh/remote.py" in names and "launchpad/agent/__init__.py" in names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)
    assert "Requires-Dist: torch" in meta and 'extra == "train"' in meta
    version = first.name.split("-")[1]
    assert f"Version: {version}" in meta


def test_content_changes_change_the_wheel(tmp_path):
    pkg = _pkg(tmp_path)
    out = tmp_path / "out"
    a = build_wheel(out, package_dir=pkg)
    assert build_wheel(out, package_dir=pkg) == a
    (pkg / "sub" / "mod.py").write_text("X = 2\n")
    b = build_wheel(out, package_dir=pkg)
    assert b != a and a.exists() and b.exists()
    (pkg / "__pycache__" / "other.pyc").write_bytes(b"\1")  # caches and temp files are not content
    assert build_wheel(out, package_dir=pkg) == b
    assert {p.name for p in package_files(pkg)} == {"__init__.py", "mod.py", "data.txt"}


def test_wheel_is_reproducible_and_its_record_verifies(tmp_path):
    pkg = _pkg(tmp_path)
    a = build_wheel(tmp_path / "a", package_dir=pkg)
    b = build_wheel(tmp_path / "b", package_dir=pkg)
    assert a.read_bytes() == b.read_bytes()
    with zipfile.ZipFile(a) as z:
        record = z.read(next(n for n in z.namelist() if n.endswith("/RECORD"))).decode()
        for line in record.splitlines():
            name, digest, size = line.rsplit(",", 2)
            if not digest:
                continue
            data = z.read(name)
            assert int(size) == len(data)
            assert digest == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def test_old_wheels_are_pruned(tmp_path):
    import os

    from launchpad.wheel import KEEP

    pkg = _pkg(tmp_path)
    out = tmp_path / "out"
    made = []
    for i in range(KEEP + 2):
        (pkg / "sub" / "mod.py").write_text(f"X = {i}\n")
        made.append(build_wheel(out, package_dir=pkg))
        os.utime(made[-1], (1000 + i, 1000 + i))  # distinct mtimes, oldest first
    left = sorted(out.glob("*.whl"))
    assert len(left) == KEEP and made[-1] in left and made[0] not in left
