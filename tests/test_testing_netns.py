"""The offline scenario runner (launchpad.testing_netns) reports what failed, not the servers' access log."""

from __future__ import annotations

import pytest

from launchpad.testing_netns import run_scenarios_offline

SCENARIOS = '''
import os, socket, sys

def test_only_loopback_is_reachable():
    assert os.environ["LAUNCHPAD_NETNS"] == "1"
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("192.0.2.1", 80))  # TEST-NET-1: no route from a namespace with only loopback
    except OSError:
        return
    raise AssertionError("reached a non-loopback address")

def test_a_scenario_that_fails_after_a_long_access_log():
    for i in range(3000):
        sys.stderr.write(f'127.0.0.1 - - [07/Dec/2026 00:38:28] "GET /bucket?list-type=2&i={i} HTTP/1.1" 200 -\\n')
    raise AssertionError("the CLI said: the instance state was unknown")
'''


def test_a_failure_is_reported_with_its_cause_and_the_whole_log_is_kept(tmp_path):
    path = tmp_path / "netns_scenarios.py"
    path.write_text(SCENARIOS)
    with pytest.raises(pytest.fail.Exception) as failed:
        run_scenarios_offline(path, tmp_path, passed=2, timeout=120)
    report = str(failed.value)
    assert "expected 2 passed" in report and "1 failed, 1 passed" in report
    assert "the CLI said: the instance state was unknown" in report  # the cause, not the tail of the access log
    assert report.count("HTTP/1.1") < 10 and len(report) < 20000
    assert "list-type=2&i=2999" in (tmp_path / "inner.log").read_text()  # everything is kept beside it


def test_a_passing_run_returns_its_output(tmp_path):
    path = tmp_path / "netns_scenarios.py"
    path.write_text(SCENARIOS.split("def test_a_scenario_that_fails")[0])
    assert "1 passed" in run_scenarios_offline(path, tmp_path, passed=1, timeout=120)
