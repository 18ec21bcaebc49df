"""User text printed by the CLI is text, not rich markup (issue 10, item 10): brackets in job names,
paths and install hints are shown as typed, never a MarkupError traceback or a lost `[s3]`."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def _smoke_recipe(folder: Path, **changes) -> Path:
    data = yaml.safe_load((REPO / "recipes" / "smoke-lora.yaml").read_text())
    data["datasets"][0]["path"] = str(REPO / "recipes" / "data" / "smoke-chat.jsonl")
    data.update(changes)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "smoke.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_logs_of_a_job_named_like_a_closing_tag(run_cli):
    """Item 10: `launchpad logs '[/x]'` is 'no job' (exit 2), not a MarkupError traceback."""
    proc = run_cli("logs", "[/x]", timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "no job '[/x]'" in proc.stderr, proc.stderr


def test_recipe_path_with_brackets(run_cli, tmp_path):
    """Item 10: a recipe under a folder `r[/v1]/` validates and its path is printed as it is."""
    recipe = _smoke_recipe(tmp_path / "r[" / "v1]")
    assert "[/v1]" in str(recipe)
    proc = run_cli("validate", str(recipe), timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{recipe}: valid" in proc.stdout and "Traceback" not in proc.stderr


def test_install_hint_keeps_its_extra(run_cli, tmp_path, launchpad_home):
    """Item 10: the hint `pip install 'launchpad[s3]'` is printed whole (rich used to eat `[s3]`).
    The s3 store is switched off the way a user would (LAUNCHPAD_DISABLE_PLUGINS), and a job whose
    checkpoints live on s3:// is exported."""
    from launchpad.jobspec import JobSpec
    from launchpad.recipe import load_recipe
    from launchpad.state import StateDB

    recipe = load_recipe(str(_smoke_recipe(tmp_path / "r")))
    spec = JobSpec.from_recipe("smoke-s3-1", recipe).replace(checkpoint_uri="s3://my-bucket/ckpt")
    db = StateDB.open()
    db.create_job("smoke-s3", None, spec, "")
    db.close()
    proc = run_cli("export", "smoke-s3-1", "--out", str(tmp_path / "out"), timeout=120,
                   env={"LAUNCHPAD_DISABLE_PLUGINS": "launchpad.storage.s3"})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "pip install 'launchpad[s3]'" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_error_printer_keeps_brackets(capfd):
    """Item 10: `main()` prints any LaunchpadError as one line with its brackets, for every extra."""
    import click
    import pytest

    from launchpad.cli import cli, main
    from launchpad.errors import BadInput

    @click.command("raise-hint")
    def raise_hint() -> None:  # a command as a plugin would add one, failing with an install hint
        raise BadInput("needs an extra [/v1]", hint="pip install 'launchpad[train]' or 'launchpad[gcs]'")

    cli.add_command(raise_hint)
    try:
        with pytest.raises(SystemExit) as exit_info:
            main(["raise-hint"])
    finally:
        cli.commands.pop("raise-hint", None)
    assert exit_info.value.code == 2
    err = capfd.readouterr().err
    assert "needs an extra [/v1] (pip install 'launchpad[train]' or 'launchpad[gcs]')" in err
