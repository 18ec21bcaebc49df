"""config.yaml is read like a recipe (issue 10, item 16): a FIFO, an alias bomb or broken YAML is one
line naming the file (exit 2), never a hang or a traceback."""

from __future__ import annotations

import os

import pytest

from launchpad.errors import ConfigError
from launchpad.settings import load_user_config

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh", strict=True)
) + "providers: {local: {bomb: *h}}\n"


def _one_error_line(proc, path) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(path) in lines[0]
    return lines[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_config_is_refused_not_waited_on(run_cli, launchpad_home):
    """Item 16: a FIFO as config.yaml used to hang every command (yaml.safe_load read it forever)."""
    path = launchpad_home / "config.yaml"
    os.mkfifo(path)
    proc = run_cli("check", timeout=30)
    assert "not a regular file" in _one_error_line(proc, path)


def test_alias_bomb_config_is_refused(run_cli, launchpad_home):
    """Item 16: an alias bomb (10^8 values from a few hundred bytes) is refused, not accepted."""
    path = launchpad_home / "config.yaml"
    path.write_text(BOMB)
    proc = run_cli("check", timeout=60)
    assert "alias" in _one_error_line(proc, path)


def test_config_problems_name_the_file_and_good_config_still_loads(launchpad_home):
    """Item 16: duplicate keys are caught (safe_load kept the last silently); a good file loads."""
    path = launchpad_home / "config.yaml"
    path.write_text("providers:\n  local: {}\nproviders:\n  ssh: {}\n")
    with pytest.raises(ConfigError, match="duplicate key") as info:
        load_user_config()
    assert str(path) in str(info.value) and info.value.exit_code == 2
    path.write_text("providers:\n  local: {root: /tmp/x}\ndisable: [aws]\n")
    assert load_user_config() == {"providers": {"local": {"root": "/tmp/x"}}, "disable": ["aws"]}
    path.write_text("")
    assert load_user_config() == {}
