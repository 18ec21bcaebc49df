"""`launchpad export --out DIR` never deletes a folder it did not write (issue 10, item 7).

The merge itself runs on the builtin tiny Llama used as a full-weights checkpoint: a real model,
saved and renamed into place, in a few seconds and without training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launchpad.errors import BadInput


def _users_folder(path: Path) -> Path:
    path.mkdir()
    (path / "thesis.tex").write_text("four years of work\n")
    (path / "src").mkdir()
    (path / "src" / "main.py").write_text("print('hi')\n")
    return path


def _untouched(path: Path) -> bool:
    return ((path / "thesis.tex").read_text() == "four years of work\n"
            and (path / "src" / "main.py").read_text() == "print('hi')\n")


def test_cli_refuses_a_folder_it_did_not_write(run_cli, tmp_path):
    """Item 7: `export --out DIR` on a folder holding a thesis and src/: exit 2, one line naming DIR
    and the fix, and every file still there."""
    out = _users_folder(tmp_path / "work")
    proc = run_cli("export", "any-job", "--out", str(out), timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(out) in lines[0] and "new or empty folder" in lines[0]
    assert _untouched(out)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    pytest.importorskip("transformers")
    from launchpad.train.tiny import ensure_tiny_llama

    return ensure_tiny_llama(tmp_path_factory.mktemp("tiny"))


def _merge(checkpoint: Path, out: Path) -> None:
    from launchpad.train.export import merge_checkpoint

    merge_checkpoint(checkpoint, None, out, log=lambda _m: None, about={"job": "j-1", "step": 3})


@pytest.fixture
def here(tmp_path) -> Path:
    """A folder of its own, so 'nothing left beside the export' can be checked by listing it."""
    (tmp_path / "here").mkdir()
    return tmp_path / "here"


def test_merge_refuses_a_users_folder_and_keeps_it(tiny_checkpoint, here):
    """Item 7: the library call refuses too (the folder used to be renamed away and deleted)."""
    tmp_path = here
    out = _users_folder(tmp_path / "work")
    with pytest.raises(BadInput, match="no launchpad export wrote"):
        _merge(tiny_checkpoint, out)
    assert _untouched(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]  # no temp folder left beside it


def test_merge_writes_new_and_empty_folders_and_replaces_its_own(tiny_checkpoint, here):
    """Item 7: a new or empty folder is written, and a previous export (it holds the marker) is
    replaced whole, with nothing left beside it."""
    from launchpad.train.export import MARKER

    tmp_path = here
    empty = tmp_path / "empty"
    empty.mkdir()
    _merge(tiny_checkpoint, empty)
    assert (empty / "model.safetensors").is_file()
    assert json.loads((empty / MARKER).read_text())["job"] == "j-1"

    (empty / "stale.bin").write_text("from an older export")
    _merge(tiny_checkpoint, empty)
    assert (empty / "model.safetensors").is_file() and not (empty / "stale.bin").exists()

    _merge(tiny_checkpoint, tmp_path / "new" / "model")
    assert (tmp_path / "new" / "model" / MARKER).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "new"]


def test_failed_merge_leaves_no_half_folder(tiny_checkpoint, here):
    """Item 7: an export that fails leaves the previous export as it was and no temporary folder;
    an unwritable place is one line (exit 2), not a traceback."""
    from launchpad.train.export import MARKER

    tmp_path = here
    (tmp_path / "ro").write_text("a file, so nothing can be created under it")
    with pytest.raises(BadInput, match="cannot write"):
        _merge(tiny_checkpoint, tmp_path / "ro" / "model")
    out = tmp_path / "model"
    _merge(tiny_checkpoint, out)
    before = sorted(p.name for p in out.iterdir())
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    with pytest.raises((OSError, ValueError)):  # transformers' own errors for an unreadable config.json
        _merge(broken, out)
    assert sorted(p.name for p in out.iterdir()) == before and MARKER in before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "model", "ro"]


def test_export_gets_the_users_modes_not_launchpads(tiny_checkpoint, here):
    """Item 18's other side: launchpad keeps its home private with a umask of 077, but an exported
    model is the user's (a vLLM server may run as another user): it gets the modes of the umask the
    user had, not mkdtemp's 0700."""
    import os
    import stat

    from launchpad.settings import make_private, user_umask

    old = os.umask(0o022)
    try:
        make_private()  # what opening the state database does in `launchpad export`
        _merge(tiny_checkpoint, here / "model")
    finally:
        os.umask(old)
    umask = user_umask()
    assert stat.S_IMODE((here / "model").stat().st_mode) == 0o777 & ~umask
    assert {stat.S_IMODE(p.stat().st_mode) for p in (here / "model").iterdir()} == {0o666 & ~umask}
