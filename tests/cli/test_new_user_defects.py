"""Issue 9, "defects found when tried as a new user would": each test failed before its fix. The CLI runs
as a user runs it (a subprocess in an isolated home); table layout is checked by rendering into a rich
Console of a given width."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml
from test_plan_cmds import QLORA_8B, REPO


def _recipe(tmp_path: Path, gpu: str) -> str:
    data = dict(QLORA_8B)
    data["resources"] = {"gpu": gpu}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


# ---- 1. unknown GPU names are bad input, before any provider is asked ------------------------------------

@pytest.mark.parametrize("gpu, close", [("Z9000:1", None), ("A100X:1", "A100")])
def test_unknown_gpu_in_a_recipe_exits_2_with_one_line(run_cli, tmp_path, gpu, close) -> None:
    recipe = _recipe(tmp_path, gpu)
    for args in (("validate", recipe), ("plan", recipe), ("up", recipe)):
        proc = run_cli(*args)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
        assert len(lines) == 1 and "Traceback" not in proc.stderr, lines
        assert lines[0].startswith(f"{recipe}: resources.gpu: unknown GPU name '{gpu.split(':')[0]}'")
        assert ("did you mean" in lines[0] and close in lines[0]) if close else "write e.g. A100" in lines[0]
        assert "rejected" not in proc.stdout  # no planning happened
    status = json.loads(run_cli("status", "--json").stdout)
    assert status == []  # `up` never submitted a job


def test_unknown_gpu_in_offers_exits_2(run_cli) -> None:
    proc = run_cli("offers", "--gpu", "A100X:1")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().count("\n") == 0
    assert "--gpu: unknown GPU name 'A100X'" in proc.stderr and "did you mean A100" in proc.stderr


# ---- 2. plan exits 1 when nothing configured can run the recipe ------------------------------------------

def test_plan_exits_1_when_no_configured_provider_fits_and_says_so_in_help(run_cli, tmp_path) -> None:
    proc = run_cli("plan", _recipe(tmp_path, "H100:8"))
    assert proc.returncode == 1
    assert "No configured provider can run this recipe" in proc.stdout
    assert "also possible with a provider you have not configured" in proc.stdout
    assert run_cli("plan", str(REPO / "recipes" / "smoke-lora.yaml")).returncode == 0  # local can run it
    help_text = " ".join(run_cli("plan", "--help").stdout.split())
    assert "Exit codes: 0 when a configured provider can run RECIPE; 1 when none can" in help_text


# ---- 3. SkyPilot's GPU names --------------------------------------------------------------------------

def test_skypilot_gpu_names_in_offers_and_recipes(run_cli, tmp_path) -> None:
    proc = run_cli("offers", "--gpu", "A100-80GB:1", "--json")
    assert proc.returncode == 0, proc.stderr
    offers = json.loads(proc.stdout)["offers"]
    assert offers and all((o["gpu"], o["gpu_memory_gb"], o["gpu_count"]) == ("A100", 80, 1) for o in offers)
    for sky, dstack in (("H100-80GB:8", "H100:80GB:8"), ("A100-80GB-SXM:1", "A100:80GB"), ("A10G", "A10G"),
                        ("L4:1", "L4"), ("V100-32GB:2", "V100:32GB:2")):
        recipe = _recipe(tmp_path, sky)
        assert run_cli("validate", recipe).returncode == 0
        plan = json.loads(run_cli("plan", recipe, "--json", "--provider", "gcp").stdout)
        assert plan["need"]["gpu"] == dstack


# ---- 4. GCP's L4 on its cheapest valid host shape -------------------------------------------------------

def test_offers_l4_cheapest_matches_skypilot(run_cli) -> None:
    on_demand = json.loads(run_cli("offers", "--gpu", "L4:1", "--json").stdout)["offers"][0]
    assert (on_demand["instance_type"], round(on_demand["price_per_hour"], 4)) == ("g2-standard-4", 0.7045)
    spot = json.loads(run_cli("offers", "--gpu", "L4:1", "--spot", "--json").stdout)["offers"][0]
    assert (spot["instance_type"], round(spot["price_per_hour"], 4)) == ("g2-standard-4", 0.2017)
    table = run_cli("offers", "--gpu", "L4:1", "--limit", "1").stdout
    assert "$0.7045" in table


# ---- 5. one line per row at 80 columns; ids and states never cut ----------------------------------------

def _render(renderable_or_fn, width: int) -> list[str]:
    from rich.console import Console

    out = io.StringIO()
    con = Console(file=out, width=width, highlight=False, color_system=None)
    if callable(renderable_or_fn):
        renderable_or_fn(con)
    else:
        con.print(renderable_or_fn)
    return out.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 160])
def test_offer_tables_keep_one_line_per_row(write_recipe_file, width) -> None:
    from launchpad.cli.plan_cmds import _market_table, _offers_table
    from launchpad.planner import plan
    from launchpad.planner.market import market

    rows = market("A100-80GB:1")[:8]
    assert any(len(m.offer.instance_type) > 20 for m in rows)  # vast's 1x-A100_SXM4-32-65536
    lines = _render(_market_table("offers", rows, width=width), width)
    assert len(lines) == 1 + 2 + len(rows)  # title, header, rule, one line per offer
    assert all(len(line) <= width for line in lines)
    if width >= 160:
        assert "1x-A100_SXM4-32-65536" in "\n".join(lines) and "host" in lines[1]
    ranked = plan(write_recipe_file(QLORA_8B), {}, {}).unconfigured[:10]
    lines = _render(_offers_table("ranked", list(ranked), width=width), width)
    assert len(lines) == 3 + len(ranked) and all(len(line) <= width for line in lines)
    assert all("$" in line for line in lines[3:])  # the price is never the column that gives way


@pytest.mark.parametrize("width", [80, 160])
def test_jobs_table_never_cuts_the_id_or_state(width) -> None:
    from launchpad.cli._views import render_jobs

    ids = ["smoke-lora-20260514-101500-3f9a", "qlora-8b-with-a-longer-name-20260514-101501-77aa"]
    rows = [{"id": i, "state": "SUCCEEDED", "provider": "local", "step": 100, "total_steps": 100, "loss": 0.4321,
             "last_checkpoint": f"file:///home/u/.launchpad/checkpoints/{i}/checkpoint-100", "cost_usd": 0.0,
             "created_at": None} for i in ids]
    lines = _render(lambda con: render_jobs(rows, con), width)
    assert len(lines) == 3 + len(rows) and all(len(line) <= width for line in lines)
    for job_id, line in zip(ids, lines[3:], strict=True):
        assert job_id in line and "SUCCEEDED" in line


def test_offers_cli_at_80_columns(run_cli) -> None:
    proc = run_cli("offers", "--gpu", "A100:80GB:1", "--limit", "5", env={"COLUMNS": "80"})
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) == 3 + 5 and all(len(line) <= 80 for line in lines)


# ---- 6. validate --json on an invalid recipe ----------------------------------------------------------

def test_validate_json_lists_the_problems(run_cli, tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nbase_model: builtin:tiny-llama\ndatasets:\n  - path: tatsu-lab/alpaca\n"
                    "    type: jsonl\nmax_steps: 5\nlearnin_rate: 1\nresources:\n  gpu: A100X:1\n")
    proc = run_cli("validate", str(path), "--json")
    assert proc.returncode == 2
    data = json.loads(proc.stdout)
    assert data["valid"] is False
    by_field = {p["field"]: p for p in data["problems"]}
    assert set(by_field) == {"datasets[0].type", "learnin_rate", "resources.gpu"}
    assert all(set(p) == {"file", "line", "field", "message", "fix"} and p["file"] == str(path)
               for p in data["problems"])
    assert (by_field["resources.gpu"]["line"], by_field["learnin_rate"]["line"]) == (9, 7)
    assert "did you mean A100" in by_field["resources.gpu"]["fix"]
    assert by_field["learnin_rate"]["fix"] == "did you mean 'learning_rate'?"
    assert by_field["datasets[0].type"]["message"] == "must be 'chat', 'alpaca' or 'completion' (got 'jsonl')"
    # the human form is unchanged: one line per problem on stderr, nothing on stdout
    human = run_cli("validate", str(path))
    assert human.returncode == 2 and human.stdout == "" and len(human.stderr.strip().splitlines()) == 3
    yaml_error = tmp_path / "y.yaml"
    yaml_error.write_text("a: [1\n")
    problem = json.loads(run_cli("validate", str(yaml_error), "--json").stdout)["problems"][0]
    assert problem["line"] == 2 and problem["field"] is None and "invalid YAML" in problem["message"]
    good = json.loads(run_cli("validate", str(REPO / "recipes" / "smoke-lora.yaml"), "--json").stdout)
    assert good["valid"] is True


@pytest.fixture
def write_recipe_file(tmp_path):
    from launchpad.recipe import load_recipe

    def make(data: dict):
        path = tmp_path / "w.yaml"
        path.write_text(yaml.safe_dump(data))
        return load_recipe(path)

    return make
