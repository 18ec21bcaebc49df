"""The multi-node preflight's parts on this machine: the bus-bandwidth arithmetic, the NTP-style offset
against a real skewed clock (libfaketime), the skew and bandwidth verdicts and their messages, the
fabric promises in providers.yaml, and the all-reduce probe itself: two real ranks over gloo on
127.0.0.1, and a rank whose peer never comes ending on its own. The probe across SSH hosts, through
the CLI, is in tests/providers/ssh/test_ssh_preflight.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from launchpad.agent.probe import bus_bandwidth
from launchpad.errors import PreflightFailed
from launchpad.planner.catalog import facts_for
from launchpad.preflight import (
    MAX_SKEW_S,
    Bandwidth,
    ClockOffset,
    PreflightReport,
    Promise,
    check_clocks,
    judge_bandwidth,
    measure_offset,
    status_fields,
)
from launchpad.testing_ssh import free_port, skewed_clock_env

REPO = Path(__file__).resolve().parent.parent


def bandwidth(busbw_GBps: float, world: int = 2) -> Bandwidth:
    return Bandwidth(backend="gloo", device="cpu", world_size=world, procs_per_node=1, size_bytes=32 << 20, iters=10,
                     seconds=1.0, algbw_GBps=busbw_GBps * world / (2 * (world - 1)), busbw_GBps=busbw_GBps)


def test_bus_bandwidth_is_nccl_tests_definition():
    assert bus_bandwidth(10.0, 2) == 10.0  # 2(n-1)/n = 1
    assert bus_bandwidth(10.0, 8) == 17.5  # 2 * 7 / 8
    assert bus_bandwidth(10.0, 16) == pytest.approx(18.75)
    assert bus_bandwidth(10.0, 1) == 0.0  # one rank moves nothing


def test_offset_of_a_really_skewed_clock_ntp_style():
    try:
        env = {**os.environ, **skewed_clock_env(30)}
    except RuntimeError as missing:
        pytest.fail(str(missing))

    def read(extra: dict) -> float:
        return float(subprocess.run(["date", "+%s.%N"], capture_output=True, text=True, env=extra, check=True).stdout)

    skewed = measure_offset("skewed", lambda: read(env))
    plain = measure_offset("plain", lambda: read(dict(os.environ)))
    assert skewed.offset_s == pytest.approx(30, abs=0.5) and skewed.error_s < 0.5
    assert abs(plain.offset_s) < 0.5
    with pytest.raises(PreflightFailed) as e:
        check_clocks([plain, skewed])
    text = str(e.value)
    assert "skewed is 30." in text and "ahead of plain" in text, text
    assert "timedatectl set-ntp true" in text and "chrony" in text


def test_skew_within_a_second_passes_and_the_spread_is_what_counts():
    clocks = [ClockOffset("a", 100.0, 0.01), ClockOffset("b", 100.9, 0.02), ClockOffset("c", 100.5, 0.01)]
    check_clocks(clocks)  # every node 100 s off this client, but within 0.9 s of each other: fine
    assert MAX_SKEW_S == 1.0
    report = PreflightReport(nodes=("a", "b", "c"), clocks=tuple(clocks))
    assert report.skew_s == pytest.approx(0.9) and report.skew_error_s == pytest.approx(0.03)
    with pytest.raises(PreflightFailed, match=r"differ by 1\.50 s .* c is 1\.50 s ahead of a"):
        check_clocks([ClockOffset("a", 0.0, 0.01), ClockOffset("c", 1.5, 0.01)])


def test_bandwidth_under_sixty_percent_of_the_promise_is_a_warning():
    promise = Promise(100.0, "hosts.yaml: fabric_gbps of box1")
    assert judge_bandwidth(bandwidth(10.0), promise) is None  # 80 Gb/s of 100: fine
    assert judge_bandwidth(bandwidth(7.5), promise) is None  # exactly 60 %
    warning = judge_bandwidth(bandwidth(5.0), promise)  # 40 Gb/s
    assert warning and "40.0 Gb/s" in warning and "40% of the 100 Gb/s" in warning and "fabric_gbps of box1" in warning
    assert judge_bandwidth(bandwidth(0.1), None) is None  # nothing promised: reported, not judged
    report = PreflightReport(nodes=("a", "b"), clocks=(ClockOffset("a", 0, 0), ClockOffset("b", 0, 0)),
                             bandwidth=bandwidth(5.0), promise=promise, warnings=(warning,))
    assert report.share == pytest.approx(0.4) and "40% of the 100 Gb/s promised" in report.summary()
    event = report.event()
    assert event["busbw_gbps"] == 40.0 and event["expected_gbps"] == 100.0 and event["warnings"] == [warning]
    json.dumps(event)  # the state DB stores it as JSON


def test_status_shows_the_newest_preflight_and_its_warnings():
    events = [{"kind": "synced", "data": {}},
              {"kind": "preflight", "data": {"skew_s": 0.01, "busbw_gbps": 8.0, "warnings": ["old"]}},
              {"kind": "preflight", "data": {"skew_s": 0.02, "busbw_gbps": 9.0, "expected_gbps": 10.0, "share": 0.9,
                                             "warnings": []}}]
    assert status_fields(events) == {"preflight": {"skew_s": 0.02, "busbw_gbps": 9.0, "expected_gbps": 10.0,
                                                   "share": 0.9}, "warnings": []}
    assert status_fields(events[:2])["warnings"] == ["old"]
    assert status_fields(events[:1]) == {}


def test_providers_yaml_promises_fabric_bandwidth_with_its_source():
    p5 = facts_for("aws", "p5.48xlarge")
    assert p5.fabric == "efa" and p5.fabric_gbps == 3200 and p5.source("fabric_gbps").startswith("docs:")
    assert facts_for("aws", "p4d.24xlarge").fabric_gbps == 400
    assert facts_for("azure", "Standard_ND96isr_H100_v5").fabric_gbps == 3200
    assert facts_for("gcp", "a3-megagpu-8g").fabric_gbps == 1600
    assert facts_for("aws", "g5.xlarge").fabric_gbps is None  # unknown: the probe's figure is not judged


def _probe(rank: int, nodes: int, port: int, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "launchpad.agent.probe", "--node-rank", str(rank), "--nodes", str(nodes),
                             "--master-addr", "127.0.0.1", "--master-port", str(port), "--seconds", "1", *extra],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.slow
def test_probe_two_ranks_over_gloo_on_loopback():
    port = free_port()
    procs = [_probe(r, 2, port) for r in (0, 1)]
    with ThreadPoolExecutor(2) as pool:  # side by side, as the client runs them; the recipe's env on stdin
        outs = list(pool.map(lambda p: p.communicate(json.dumps({"GLOO_EXAMPLE": "x"}), timeout=120), procs))
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    results = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert results[0] == results[1]  # both nodes report the slowest rank's time
    r = results[0]
    assert r["backend"] == "gloo" and r["world_size"] == 2 and r["size_bytes"] == 32 << 20 and r["iters"] >= 3
    assert r["busbw_GBps"] == pytest.approx(r["algbw_GBps"])  # 2 ranks: 2(n-1)/n = 1
    assert r["busbw_GBps"] == pytest.approx(r["size_bytes"] * r["iters"] / r["seconds"] / 1e9, rel=1e-3)


@pytest.mark.slow
def test_a_probe_whose_peer_never_comes_ends_on_its_own():
    t0 = time.monotonic()
    lone = _probe(0, 2, free_port(), "--timeout", "3")
    _, err = lone.communicate("", timeout=120)
    assert lone.returncode != 0 and time.monotonic() - t0 < 60, err


def test_probe_refuses_gpus_it_does_not_see():
    proc = _probe(0, 2, free_port(), "--gpus", "8")
    _, err = proc.communicate("", timeout=120)
    assert proc.returncode == 3 and "the job expects 8" in err
