"""`launchpad reap --print-cron | --print-systemd | --print-k8s-cronjob`: what they print installs as is."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from launchpad.errors import BadInput
from launchpad.reap_units import (
    SERVICE,
    TIMER,
    cron_schedule,
    crontab_line,
    k8s_cronjob,
    launchpad_argv,
    parse_duration,
    render_systemd,
    systemd_units,
)


def test_durations_and_cron_schedules():
    assert parse_duration("10m") == 600 and parse_duration("24h") == 86400 and parse_duration("90") == 90
    assert cron_schedule(600) == "*/10 * * * *" and cron_schedule(3600) == "0 * * * *"
    assert cron_schedule(6 * 3600) == "0 */6 * * *" and cron_schedule(60) == "* * * * *"
    for bad in ("45m", "30s", "5h"):
        with pytest.raises(BadInput):
            cron_schedule(parse_duration(bad))
    with pytest.raises(BadInput):
        parse_duration("soon")


def test_crontab_line_runs_this_launchpad_and_logs(launchpad_home):
    line = crontab_line(["--max-age", "24h"], 600)
    assert line.startswith("*/10 * * * * ")
    assert launchpad_argv()[0].startswith("/") and launchpad_argv()[0] in line
    assert " reap --max-age 24h >> " in line and line.endswith(" 2>&1")
    assert f"LAUNCHPAD_HOME={launchpad_home}" in line


def test_cli_prints_the_units(run_cli):
    out = run_cli("reap", "--print-systemd", "--every", "15m", check=True).stdout
    assert f"# file: {SERVICE}" in out and f"# file: {TIMER}" in out and "OnUnitActiveSec=15min" in out
    cron = run_cli("reap", "--print-cron", check=True).stdout
    assert cron.startswith("*/10 * * * * ")
    doc = yaml.safe_load(run_cli("reap", "--print-k8s-cronjob", "--image", "ghcr.io/acme/launchpad:1", check=True).stdout)
    assert doc["kind"] == "CronJob" and doc["spec"]["schedule"] == "*/10 * * * *"
    bad = run_cli("reap", "--print-cron", "--every", "45m")
    assert bad.returncode == 2 and "evenly" in bad.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_systemd_units_verify(tmp_path):
    units = systemd_units(["--grace", "20m"], 600)
    for name, text in units.items():
        (tmp_path / name).write_text(text)
    assert render_systemd(units).count("# file: ") == 2
    exe = launchpad_argv()[0]
    if not shutil.which(exe):
        pytest.skip(f"{exe} does not exist here: systemd-analyze would reject ExecStart")
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / SERVICE), str(tmp_path / TIMER)],
                       capture_output=True, text=True, timeout=60)
    problems = [line for line in r.stderr.splitlines() if "launchpad-reap" in line]
    assert r.returncode == 0 and not problems, r.stderr


def test_k8s_cronjob_is_valid_for_every_shipped_kubernetes_version():
    kv = pytest.importorskip("kubernetes_validate")
    import os

    doc = k8s_cronjob(["--max-age", "24h"], 900, image="ghcr.io/acme/launchpad:0.1.0", secret="lp-state")
    spec = doc["spec"]
    assert spec["concurrencyPolicy"] == "Forbid" and spec["schedule"] == "*/15 * * * *"
    env = spec["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "LAUNCHPAD_STATE_URL",
            "valueFrom": {"secretKeyRef": {"name": "lp-state", "key": "LAUNCHPAD_STATE_URL"}}} in env
    schemas = os.path.join(os.path.dirname(kv.__file__), "kubernetes-json-schema")
    versions = sorted({d.split("-")[0].lstrip("v") for d in os.listdir(schemas) if d.startswith("v1.")},
                      key=lambda v: tuple(int(x) for x in v.split(".")))
    assert versions and versions[0] <= "1.25.0"
    for version in versions:
        kv.validate(doc, version, strict=True)  # raises ValidationError on any bad or unknown field
