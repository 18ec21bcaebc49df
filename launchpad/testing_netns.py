"""Running a provider's end-to-end scenarios offline: a pytest run of one scenario file inside a network
namespace that has only loopback (`unshare -n`), so nothing the CLI, agent, trainer or sshd tries can reach
a real address. The servers the scenarios use (moto, the storage emulators, the compute doubles, sshd) start
in there too.

What a failing run reports is the failure, first: the inner run's stdout is mostly the servers' access logs
(one line per request), and its last few thousand characters are the captured logs of the last failing
test, not the assertion and the CLI's stderr that say why. The whole inner output is kept beside the test
(``inner.log`` in its tmp_path) for anything the report leaves out.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# http.server's / werkzeug's access-log line for a request that went well: the noise of a long scenario
_ACCESS_OK = re.compile(r'" (?:200|201|204|206|304) -?\d*$')
_FAILURES_CHARS = 12000
_TAIL_CHARS = 3000


def _failure_report(stdout: str, stderr: str) -> str:
    """The inner run's failures section (access-log lines of successful requests dropped), its short summary
    and the tail of its stderr."""
    out = "\n".join(line for line in stdout.splitlines() if not _ACCESS_OK.search(line.strip()))
    found = [i for i in (out.find("= ERRORS ="), out.find("= FAILURES =")) if i >= 0]
    start = out.rfind("\n", 0, min(found)) + 1 if found else max(0, len(out) - _FAILURES_CHARS)
    body = out[start:start + _FAILURES_CHARS]
    summary = out.rfind("short test summary info")
    if summary > start + _FAILURES_CHARS:  # cut above: the summary names every failure
        body += "\n...\n" + out[summary:][-_TAIL_CHARS:]
    return f"{body}\n-- stderr --\n{stderr[-_TAIL_CHARS:]}"


def run_scenarios_offline(scenarios: Path, tmp_path: Path, *, passed: int, drop_env: Iterable[str] = (),
                          inner_timeout: int = 900, timeout: int = 2400, durations: int = 0) -> str:
    """Run the pytest file `scenarios` in a loopback-only network namespace; fail (pytest.fail) unless every
    one of its `passed` tests passed. `drop_env`: variables that would point the scenarios at servers
    outside (they start their own). Returns the inner run's stdout."""
    import pytest

    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.fail("needs util-linux's unshare and iproute2's ip (.ci/run installs them)")
    # the scenarios run one after another, in this process's worker: -n 0 overrides an `-n auto` in addopts
    serial = "-n 0 " if importlib.util.find_spec("xdist") is not None else ""
    inner = (f"ip link set lo up && exec {sys.executable} -m pytest -q -p no:cacheprovider {serial}--timeout {inner_timeout} "
             f"--log-level=WARNING {f'--durations={durations} ' if durations else ''}"
             f"--basetemp {tmp_path / 'inner'} {scenarios}")
    env = {**os.environ, "LAUNCHPAD_NETNS": "1"}
    for name in drop_env:
        env.pop(name, None)
    proc = subprocess.run(["unshare", "-n", "sh", "-c", inner], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)
    (tmp_path / "inner.log").write_text(proc.stdout + "\n-- stderr --\n" + proc.stderr)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or not re.search(rf"\b{passed} passed\b", last) or re.search(r"failed|error|skipped", last):
        pytest.fail(f"{scenarios.name} in a loopback-only namespace: exit {proc.returncode}, {last!r} "
                    f"(expected {passed} passed; whole output: {tmp_path / 'inner.log'})\n"
                    + _failure_report(proc.stdout, proc.stderr), pytrace=False)
    return proc.stdout
