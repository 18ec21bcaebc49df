"""How a run is going in `launchpad status JOB` (launchpad.cli._progress_view, launchpad.jobstatus): the
sparkline, ETA and projected cost from the measured step time, the plan's estimate, eval loss, the view at
80 and 120 columns, and `--watch` (which ends with the job)."""

from __future__ import annotations

import io
import json
import time

from click.testing import CliRunner
from rich.console import Console

from launchpad.cli._progress_view import progress_rows, sparkline
from launchpad.cli._views import job_view, jobs_view
from launchpad.jobstatus import forecast, plan_estimate
from launchpad.models import Offer
from launchpad.train.status import StatusWriter


def test_sparkline_scales_and_buckets():
    assert sparkline([3, 2, 1], 10) == "█▄▁"
    assert sparkline([5, 5], 10) == "▁▁"  # flat: no division by zero
    long = sparkline([float(100 - i) for i in range(100)], 20)
    assert len(long) == 20 and long[0] == "█" and long[-1] == "▁"
    assert sparkline([], 10) == ""


def test_forecast_from_the_measured_step_time():
    row = {"step": 40, "total_steps": 100, "step_seconds": 3.0, "cost_usd": 1.0, "disk_usd": 0.5}
    f = forecast(row, price_per_hour=12.0)
    assert f["eta_s"] == 180.0 and f["projected_usd"] == 1.5 + 180 / 3600 * 12.0
    assert forecast({**row, "step_seconds": None}, 12.0) == {} and forecast({**row, "step": 100}, 12.0) == {}


def test_the_plans_estimate_is_the_one_for_the_offer_used():
    plan = [{"offer": {"provider": "aws", "instance_type": "g6.xlarge", "region": "us-east-1"}, "est_cost": 3.21},
            {"offer": {"provider": "gcp", "instance_type": "g2-standard-4", "region": "us-central1"}, "est_cost": 2.5}]
    assert plan_estimate(plan, Offer("gcp", "g2-standard-4", "us-central1")) == 2.5
    assert plan_estimate(plan, Offer("aws", "p5.48xlarge", "us-east-1")) is None and plan_estimate(None, None) is None


def live_row(job_id: str = "qlora-8b-3f9a2c") -> dict:
    return {"id": job_id, "name": "qlora-8b", "state": "TRAINING", "phase": "training", "provider": "aws", "step": 40,
            "total_steps": 100, "loss": 1.2, "last_checkpoint": f"s3://b/ckpt/{job_id}/checkpoint-25", "cost_usd": 1.0,
            "disk_usd": 0.0, "recipe": "recipes/qlora-8b.yaml", "created_at": time.time() - 600,
            "losses": [[s, 7.0 / s] for s in range(1, 41)], "eval_losses": [[20, 2.0], [40, 1.5]],
            "tokens_per_s": 5123.4, "step_seconds": 2.5, "eta_s": 150.0, "projected_usd": 1.8, "estimate_usd": 2.1,
            "store_checkpoint": {"step": 25, "uri": "s3://b/ckpt/x/checkpoint-25", "created_at": time.time() - 90}}


def test_the_job_view_at_80_and_120_columns():
    for width in (80, 120):
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(job_view(live_row(), [], width))
        text = out.getvalue()
        lines = text.splitlines()
        assert all(len(line) <= width for line in lines)
        assert lines[0].strip() == "qlora-8b-3f9a2c"  # the id is never cut
        curve = next(line for line in lines if "loss curve" in line)
        assert "40 logged" in curve and "█" in curve  # the curve and its legend on one line
        for part in ("eval loss", "1.5 (2 evaluations)", "5,123 tokens/s, 2.50 s/step", "ETA", "2m",
                     "$1.00 so far, $1.80 projected, $2.10 planned", "checkpoint-25, complete, written 2m ago"):
            assert part in text, (width, part, text)


def test_the_jobs_table_draws_a_live_jobs_curve_when_there_is_room():
    done = {**live_row("smoke-lora-1a2b3c"), "state": "SUCCEEDED", "losses": None}
    for width, shown in ((80, False), (120, True)):
        out = io.StringIO()
        Console(file=out, width=width, color_system=None).print(jobs_view([live_row(), done], width))
        lines = out.getvalue().splitlines()
        assert all(len(line) <= width for line in lines) and len(lines) == 5, lines  # title, header, rule, a line per row
        live = next(line for line in lines if "qlora-8b-3f9a2c" in line)
        assert ("█" in live and "▁" in live) is shown, (width, live)
        assert "█" not in next(line for line in lines if "smoke-lora-1a2b3c" in line)


def test_no_figures_no_rows():
    rows = dict(progress_rows({"id": "j", "cost_usd": 0.0}, 80))
    assert list(rows) == ["cost"] and rows["cost"] == "$0.00 so far"


def test_status_writer_keeps_eval_losses(tmp_path):
    w = StatusWriter(tmp_path / "status.json", "j")
    w.add_loss(10, 2.0, step_seconds=0.5)
    w.add_eval_loss(10, 2.5)
    w.add_eval_loss(20, 2.1)
    doc = json.loads((tmp_path / "status.json").read_text())
    assert doc["eval_losses"] == [[10, 2.5], [20, 2.1]] and doc["eval_loss"] == 2.1 and doc["step_seconds"] == 0.5


def test_watch_ends_with_the_job(launchpad_home):
    from launchpad.cli import cli
    from launchpad.errors import BadInput
    from launchpad.state import StateDB
    from launchpad.testing_state import fill_state

    db = StateDB.open()
    (job_id,) = fill_state(db, 1, live_every=0)  # a finished job: --watch shows it once and returns
    db.close()
    env = {"COLUMNS": "120", "AWS_EC2_METADATA_DISABLED": "true"}
    res = CliRunner().invoke(cli, ["status", job_id, "--watch", "--interval", "0.1"], env=env, catch_exceptions=False)
    assert res.exit_code == 0 and job_id in res.output
    res = CliRunner().invoke(cli, ["status", "--watch", "--json"], env=env, catch_exceptions=False)
    lines = res.stdout.strip().splitlines()
    assert res.exit_code == 0 and len(lines) == 1 and json.loads(lines[0])[0]["id"] == job_id
    bad = CliRunner().invoke(cli, ["status", "--watch", "--interval", "0"], env=env)
    assert isinstance(bad.exception, BadInput) and "--interval 0" in str(bad.exception)  # exit 2 in the real CLI


def test_watch_without_a_job_follows_the_only_live_one(launchpad_home):
    """`up --detach && status --watch`: the one live job is watched as `status JOB --watch` (its curve)."""
    import threading

    from launchpad.cli import cli
    from launchpad.models import JobState
    from launchpad.state import StateDB
    from launchpad.testing_state import fill_state

    db = StateDB.open()
    finished, live = fill_state(db, 2, live_every=2)  # the second is PENDING
    ends = threading.Timer(0.5, lambda: db.set_state(live, JobState.FAILED, error="stopped by the test"))
    ends.start()
    env = {"COLUMNS": "120", "AWS_EC2_METADATA_DISABLED": "true"}
    res = CliRunner().invoke(cli, ["status", "--watch", "--interval", "0.1"], env=env, catch_exceptions=False)
    ends.join()
    db.close()
    assert res.exit_code == 0 and f"watching {live}, the only live job" in res.stderr
    assert "stopped by the test" in res.stdout and finished not in res.stdout  # the job's view, not the table
