"""`launchpad catalog refresh` (launchpad.planner.refresh) with gpuhunt's real provider classes against a
loopback double of the endpoints they call (gpuhunt_doubles), and the planner reading what it wrote
(launchpad.planner.catalog): the refreshed file when usable, else the bundled snapshot, and how old each is.

The CLI runs in-process (`launchpad.cli.main`): Lambda's, Vast's and RunPod's URLs are module constants in
gpuhunt, pointed at the double with monkeypatch, which only reaches this process. The published-catalog
path needs no patch (GPUHUNT_CATALOG_URL, gpuhunt's documented setting): test_cli_plan_offers_show_age
runs it as a user does, in subprocesses.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from gpuhunt_doubles import LAMBDA_KEY, PUBLISHED_VERSION, GpuhuntDouble, published_csv

from launchpad.planner.catalog import catalog_sources, load_catalog, refreshed_dir

REPO = Path(__file__).resolve().parents[2]
BUNDLED_VAST = 64  # rows of configs/catalog/vast.csv


@pytest.fixture(scope="module")
def double():
    d = GpuhuntDouble()
    yield d
    d.close()


@pytest.fixture
def gh(double, monkeypatch):
    """gpuhunt pointed at the double: its Lambda/Vast/RunPod URL constants (monkeypatch: gpuhunt's config,
    not launchpad's code) and GPUHUNT_CATALOG_URL for dstack's published catalogs."""
    double.fail.clear()
    double.requests.clear()
    monkeypatch.setattr("gpuhunt.providers.lambdalabs.INSTANCE_TYPES_URL", double.url("/lambda/api/v1/instance-types"))
    monkeypatch.setattr("gpuhunt.providers.lambdalabs.IMAGES_URL", double.url("/lambda/api/v1/images"))
    monkeypatch.setattr("gpuhunt.providers.vastai.bundles_url", double.url("/vast/api/v0/bundles/"))
    monkeypatch.setattr("gpuhunt.providers.runpod.API_URL", double.url("/runpod/graphql"))
    monkeypatch.setenv("GPUHUNT_CATALOG_URL", double.url("/published"))
    monkeypatch.delenv("GPUHUNT_CATALOG_DIR", raising=False)
    monkeypatch.delenv("LAMBDA_API_KEY", raising=False)
    return double


@pytest.fixture
def cli(capsys, monkeypatch):
    """The real `launchpad` entry point in this process: (exit code, stdout, stderr)."""
    from launchpad.cli import main

    # plan/offers check the installed providers; botocore's credential chain would try the EC2 metadata
    # address (pytest-socket refuses it, with a warning) on this machine that has no AWS credentials
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main(list(args))
        out = capsys.readouterr()
        return int(exc.value.code or 0), out.out, out.err

    return run


def test_refresh_lambda_vast_writes_files_with_fetch_time_and_the_planner_uses_them(gh, cli) -> None:
    t0 = time.time()
    rc, out, err = cli("catalog", "refresh", "lambda", "vast", "--json")
    assert rc == 0, err
    result = {o["provider"]: o for o in json.loads(out)["providers"]}
    assert {p: (o["status"], o["source"]) for p, o in result.items()} == {
        "lambda": ("written", "published"), "vast": ("written", "live")}
    folder = refreshed_dir()
    for p in ("lambda", "vast"):
        meta = json.loads((folder / f"{p}.meta.json").read_text())
        fetched = datetime.fromisoformat(meta["fetched_at"].replace("Z", "+00:00")).timestamp()
        assert t0 - 2 <= fetched <= time.time() + 1
        assert meta["source"].startswith("gpuhunt 0.1.34: ") and meta["rows"] == result[p]["rows"] > 0
    assert PUBLISHED_VERSION in json.loads((folder / "lambda.meta.json").read_text())["source"]
    assert not list(folder.glob("*.tmp")), "no temp file left behind"

    cat = load_catalog(["lambda", "vast"])
    # lambda: dstack's published rows (2 regions of a10, 1 h100, 1 gh200), canonical names
    assert sorted((o.instance_type, o.region, o.gpu, o.gpu_count) for o in cat["lambda"]) == [
        ("gpu_1x_a10", "us-east-1", "A10", 1), ("gpu_1x_a10", "us-west-1", "A10", 1),
        ("gpu_1x_gh200", "us-east-1", "GH200", 1), ("gpu_8x_h100_sxm5", "us-east-1", "H100", 8)]
    # vast: live bundles search; the rented host is left out, min_bid is the spot price, names canonical
    # (instance types named as in the bundle: count x Vast's GPU name, vCPUs, RAM in MB; A100 is two Vast names)
    vast = {o.instance_type: o for o in cat["vast"]}
    assert set(vast) == {"1x-RTX_4090-8-32000", "2x-A100-32-256000"}
    rtx, a100 = vast["1x-RTX_4090-8-32000"], vast["2x-A100-32-256000"]
    assert (rtx.gpu, rtx.gpu_memory_gb, rtx.region) == ("RTX4090", 24, "no-oslo")
    assert rtx.spot_price_per_hour is not None and rtx.spot_price_per_hour < rtx.price
    # the price is gpuhunt's: the host's hourly base plus the planner's smallest disk (50 GB) at its storage rate
    assert rtx.price == pytest.approx(0.35 + 50 * 0.1 / 30 / 24, abs=1e-5)
    assert (a100.gpu, a100.gpu_count, a100.spot_price_per_hour) == ("A100", 2, None)
    search = next(r for r in gh.requests if r[1] == "/vast/api/v0/bundles/")
    assert search[0] == "POST"
    src = catalog_sources(["lambda", "vast", "aws"])
    assert (src["lambda"].kind, src["vast"].kind, src["aws"].kind) == ("refreshed", "refreshed", "bundled")
    assert src["vast"].label() == "refreshed just now" and src["aws"].label() == "bundled snapshot of 2026-01-21"

    # `offers` prints the age per provider and carries it in --json
    rc, out, err = cli("offers", "--provider", "vast")
    assert rc == 0, err
    assert "catalog: refreshed just now (vast)" in err and "1xRTX4090" in out
    rc, out, _ = cli("offers", "--json")
    info = json.loads(out)["catalog"]
    assert info["vast"]["source"] == "refreshed" and info["vast"]["age_s"] < 60
    assert info["gcp"] == {**info["gcp"], "source": "bundled", "as_of": "2026-05-20"}


def test_live_lambda_and_runpod_through_their_apis(gh, cli, monkeypatch) -> None:
    monkeypatch.setenv("LAMBDA_API_KEY", LAMBDA_KEY)
    rc, out, err = cli("catalog", "refresh", "lambdalabs", "runpod", "--source", "live")  # gpuhunt's name works too
    assert rc == 0, err
    assert LAMBDA_KEY not in out + err
    assert "✓ lambda: 6 offers from lambdalabs API, live" in out  # 3 GPU types x 2 regions; the CPU type skipped
    assert "✓ runpod: 10 offers from runpod API, live" in out and "runpod-cluster 2" in out
    assert {auth for _, path, auth in gh.requests if path.startswith("/lambda/")} == {f"Bearer {LAMBDA_KEY}"}
    runpod = load_catalog(["runpod"])["runpod"]  # not in the bundle: the refresh adds the provider
    assert {(o.gpu, o.gpu_count) for o in runpod} == {("A100", 1), ("A100", 2), ("RTX4090", 1), ("RTX4090", 2)}
    assert {o.region for o in runpod} == {"US-TX-3", "EU-RO-1", "CA"}  # secure datacentres + community country
    assert min(o.price for o in runpod if o.gpu == "A100" and o.region == "CA") == pytest.approx(1.19)
    h100 = next(o for o in load_catalog(["lambda"])["lambda"] if o.gpu == "H100")
    assert (h100.gpu_count, h100.gpu_memory_gb, h100.price, h100.vcpus) == (8, 80, 23.92, 208)


def test_skips_say_why_and_nothing_written_is_exit_1(gh, cli) -> None:
    rc, out, err = cli("catalog", "refresh", "lambda", "aws", "--source", "live")
    assert rc == 1
    assert "lambda: skipped: --source live needs a Lambda API key ($LAMBDA_API_KEY" in out
    assert "aws: skipped: no live source" in out and "--source published" in out
    assert "catalog refresh: nothing was written" in err
    assert not gh.requests and not refreshed_dir().exists()


def test_unknown_provider_is_one_line_exit_2_before_any_request(gh, cli) -> None:
    rc, out, err = cli("catalog", "refresh", "lambda", "nimbus")
    assert rc == 2 and out == ""
    assert err.strip().count("\n") == 0
    assert "unknown provider 'nimbus'" in err and "aws, azure, gcp, lambda, runpod, vast" in err
    assert "fluidstack, paperspace come from the bundled snapshot only" in err
    assert not gh.requests


def test_a_failed_provider_is_exit_1_naming_it_the_others_written(gh, cli) -> None:
    rc, _, err = cli("catalog", "refresh", "vast")
    assert rc == 0, err
    before = (refreshed_dir() / "vast.csv").read_text()
    gh.fail.add("/vast/")  # INJECTION: Vast answers 500
    rc, out, err = cli("catalog", "refresh", "vast", "gcp", "azure")
    assert rc == 1
    assert "✗ vast: live fetch failed: HTTPError: 500" in out
    assert "catalog refresh failed for vast (the others were written)" in err
    assert "✓ gcp: 1 offer from" in out and "✓ azure: 1 offer from" in out
    assert (refreshed_dir() / "vast.csv").read_text() == before  # the last good catalog stays
    # gcp: the zone's region derived, the spot row merged, the TPU and the calendar-mode row left out
    (g,) = load_catalog(["gcp"])["gcp"]
    assert (g.instance_type, g.region, g.zone, g.gpu, g.price, g.spot_price_per_hour) == (
        "g2-standard-4", "us-central1", "us-central1-a", "L4", 0.70683, 0.28073)
    assert "gcp-dws-calendar-mode 1" in out and "tpu 1" in out

    gh.fail.add("/published/")  # INJECTION: the catalog bucket answers 500 for everything
    rc, out, _ = cli("catalog", "refresh", "aws", "--json")
    (aws,) = json.loads(out)["providers"]
    assert rc == 1 and aws["status"] == "failed" and "HTTP Error 500" in aws["detail"]


def test_unusable_refreshed_files_fall_back_to_the_bundle_with_a_warning(gh, cli, tmp_path) -> None:
    assert cli("catalog", "refresh", "vast", "lambda")[0] == 0
    folder = refreshed_dir()
    # cut short (a crash in a tool that is not ours, a full disk): the meta's row count gives it away
    text = (folder / "vast.csv").read_text()
    (folder / "vast.csv").write_text(text.splitlines()[0] + "\n" + text.splitlines()[1] + "\n")
    # a meta that is not JSON
    (folder / "lambda.meta.json").write_text("{not json")
    src = catalog_sources(["vast", "lambda"])
    assert src["vast"].kind == "bundled" and "it has 1 rows, its meta says 2" in (src["vast"].warning or "")
    assert src["lambda"].kind == "bundled" and "cannot read it" in (src["lambda"].warning or "")
    assert len(load_catalog(["vast"])["vast"]) == BUNDLED_VAST
    rc, out, err = cli("offers", "--provider", "vast")
    err = " ".join(err.split())
    assert rc == 0 and "bundled snapshot of 2026-05-20 (vast)" in err
    assert "! catalog: " in err and "vast.csv: it has 1 rows" in err and "catalog refresh vast` rewrites it" in err
    rc, out, err = cli("plan", _recipe_file(tmp_path))  # plans (exit 1: nothing configured has a GPU), warns
    err = " ".join(err.split())  # stderr wraps at the terminal's width
    assert rc == 1 and "Traceback" not in err and "bundled snapshot of 2026-05-20 (" in err and "vast.csv: it has" in err
    # no meta at all, and a CSV with other columns: the same fallback
    (folder / "vast.meta.json").unlink()
    assert "vast.meta.json is missing" in (catalog_sources(["vast"])["vast"].warning or "")
    (folder / "lambda.csv").write_text("a,b\n1,2\n")
    (folder / "lambda.meta.json").write_text(json.dumps({"rows": 1, "fetched_at": "2026-12-01T00:00:00Z"}))
    assert "its header is not InstanceType," in (catalog_sources(["lambda"])["lambda"].warning or "")
    # a good refresh replaces them
    assert cli("catalog", "refresh", "vast", "lambda")[0] == 0
    assert {s.kind for s in catalog_sources(["vast", "lambda"]).values()} == {"refreshed"}


def test_an_old_refresh_says_its_age_and_asks_for_another(gh, cli) -> None:
    assert cli("catalog", "refresh", "vast")[0] == 0
    meta_file = refreshed_dir() / "vast.meta.json"
    meta = json.loads(meta_file.read_text())
    meta["fetched_at"] = datetime.fromtimestamp(time.time() - 10 * 86400, tz=timezone.utc).isoformat()
    meta_file.write_text(json.dumps(meta))
    assert catalog_sources(["vast"])["vast"].label() == "refreshed 10 d ago"
    rc, out, err = cli("offers", "--provider", "vast")
    err = " ".join(err.split())
    assert rc == 0 and "catalog: refreshed 10 d ago (vast); `launchpad catalog refresh` fetches current offers" in err
    rc, out, _ = cli("catalog", "show")
    assert rc == 0 and "refreshed 10 d ago" in out


def _recipe_file(folder: Path) -> str:
    path = folder / "recipe.yaml"
    path.write_text(yaml.safe_dump({
        "name": "r", "base_model": "meta-llama/Meta-Llama-3-8B", "adapter": "qlora", "max_steps": 10,
        "datasets": [{"path": "tatsu-lab/alpaca", "type": "alpaca"}], "resources": {"gpu": "24GB.."}}))
    return str(path)


def test_gpuhunt_catalog_dir_is_an_offline_input(gh, cli, tmp_path, monkeypatch) -> None:
    (tmp_path / "aws.csv").write_text(published_csv("aws"))  # as `python -m gpuhunt aws --output aws.csv` writes
    monkeypatch.setenv("GPUHUNT_CATALOG_DIR", str(tmp_path))
    rc, out, err = cli("catalog", "refresh", "aws", "azure")
    assert rc == 1, err  # azure.csv is not there
    assert "✓ aws: 2 offers from" in out and "(GPUHUNT_CATALOG_DIR)" in out  # m5.large: no GPU, not asked for
    assert "✗ azure: published fetch failed" in out and "has no azure.csv" in out
    g5 = next(o for o in load_catalog(["aws"])["aws"] if o.instance_type == "g5.xlarge")
    assert (g5.gpu, g5.price, g5.spot_price_per_hour, g5.zone) == ("A10G", 1.006, 0.4112, None)
    assert not gh.requests  # nothing was downloaded

    rc, out, _ = cli("catalog", "show", "--json")
    shown = json.loads(out)
    assert shown["providers"]["aws"]["source"] == "refreshed" and shown["providers"]["aws"]["rows"] == 2
    assert shown["providers"]["fluidstack"]["source"] == "bundled" and "runpod" in shown["not_fetched"]


def test_without_gpuhunt_the_install_hint(cli, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "gpuhunt", None)  # what `import gpuhunt` meets when it is not installed
    rc, out, err = cli("catalog", "refresh", "vast")
    assert rc == 2 and "catalog refresh needs gpuhunt" in err and "pip install 'launchpad[catalog]'" in err


def test_import_launchpad_does_not_import_gpuhunt() -> None:
    code = ("import sys, launchpad, launchpad.cli, launchpad.planner.catalog, launchpad.cli.catalog_cmd, "
            "launchpad.planner.refresh; assert 'gpuhunt' not in sys.modules, 'gpuhunt imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_cli_plan_offers_show_age(gh, run_cli, tmp_path) -> None:
    """As a user runs it: refresh from the published catalogs (GPUHUNT_CATALOG_URL), then plan/offers."""
    env = {"GPUHUNT_CATALOG_URL": gh.url("/published")}
    proc = run_cli("catalog", "refresh", "lambda", "aws", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "✓ lambda: 4 offers from dstack's published lambdalabs catalog" in proc.stdout
    proc = run_cli("offers", "--gpu", "H100:8", env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    assert all(len(x) <= 80 for x in proc.stderr.splitlines())
    line = " ".join(proc.stderr.split())  # the notice is on stderr, wrapped at the terminal's width
    assert "catalog: " not in proc.stdout
    assert "refreshed just now (aws, lambda)" in line and "bundled snapshot of 2026-05-20 (azure, gcp, vast)" in line
    assert "`launchpad catalog refresh` fetches current offers" in line  # some are still the bundle
    proc = run_cli("plan", _recipe_file(tmp_path), "--json", "--provider", "lambda")
    data = json.loads(proc.stdout)
    assert set(data["catalog"]) == {"lambda"} and data["catalog"]["lambda"]["source"] == "refreshed"
    assert data["catalog"]["lambda"]["rows"] == 4
