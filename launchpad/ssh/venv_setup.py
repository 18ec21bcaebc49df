"""Prepare launchpad's virtualenv on a host: ``PYTHON - VENV WHEEL < venv_setup.py`` (source on stdin).

Runs ON the host before launchpad is installed there, so it is one stdlib-only file that the client
sends over the SSH channel. It prints one JSON line: {"python": ".../bin/python", "action": ...}.

- reuse: VENV/bin/python runs and VENV/.launchpad-wheel names this very wheel -> nothing to do;
- create: ``PYTHON -m venv --system-site-packages`` and a ``.pth`` that also links PYTHON's own
  site-packages (when PYTHON is itself a venv or conda env with torch, those are not "system"
  packages), so a host's preinstalled CUDA/torch stack is reused instead of downloaded again;
- install: when every requirement of launchpad and its ``[train]`` extra is already satisfied (checked
  against the wheel's own metadata with pip's vendored `packaging`), only the wheel with ``--no-deps``;
  otherwise ``WHEEL[train]`` from the index.
A lock file serialises concurrent set-ups of the same venv.
"""

import fcntl
import json
import os
import shutil
import site
import subprocess
import sys

PROBE = r"""
import sys, zipfile
from importlib import metadata
try:
    from pip._vendor.packaging.requirements import Requirement
except ImportError:
    from packaging.requirements import Requirement
wheel = sys.argv[1]
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
missing = []
for line in lines:
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker is not None and not req.marker.evaluate({"extra": "train"}):
        continue
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        missing.append(req.name)
        continue
    if req.specifier and not req.specifier.contains(version, prereleases=True):
        missing.append(f"{req.name}=={version} ({req.specifier})")
print(",".join(missing))
"""


def run(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def fail(message, proc=None):
    tail = ""
    if proc is not None:
        tail = " | ".join((proc.stderr or proc.stdout or "").strip().splitlines()[-5:])
    sys.stderr.write(f"venv setup: {message}{': ' + tail if tail else ''}\n")
    sys.exit(1)


def prune(folder, keep):
    """Keep the `keep` newest launchpad wheels: every code change sends a new one."""
    wheels = [os.path.join(folder, n) for n in os.listdir(folder) if n.startswith("launchpad-") and n.endswith(".whl")]
    for path in sorted(wheels, key=os.path.getmtime, reverse=True)[keep:]:
        try:
            os.unlink(path)
        except OSError:
            pass


def works(python):
    return os.path.exists(python) and run([python, "-c", "pass"]).returncode == 0


def main():
    if sys.version_info < (3, 10):
        fail(f"launchpad needs Python >= 3.10 on the host; {sys.executable} is {sys.version.split()[0]} "
             "(set `python:` in hosts.yaml to a newer interpreter)")
    venv, wheel = sys.argv[1], sys.argv[2]
    python = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, ".launchpad-wheel")
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    with open(venv + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if works(python):
            try:
                with open(marker) as f:
                    if f.read().strip() == os.path.basename(wheel):
                        print(json.dumps({"python": python, "action": "reused"}))
                        return
            except OSError:
                pass
        else:
            shutil.rmtree(venv, ignore_errors=True)  # missing or broken (its interpreter was removed)
            proc = run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv])
            if proc.returncode != 0:
                fail(f"`{sys.executable} -m venv {venv}` failed (install python3-venv?)", proc)
            purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip()
            own = [p for p in site.getsitepackages() if os.path.isdir(p)]
            # addsitedir, not bare paths: that env's own .pth files (editable installs) must work too,
            # or its plugins' entry points would point at modules that cannot be imported
            with open(os.path.join(purelib, "_launchpad_base.pth"), "w") as f:
                f.write("".join(f"import site; site.addsitedir({p!r})\n" for p in own))
        if run([python, "-c", "import pip"]).returncode != 0:
            proc = run([python, "-m", "ensurepip", "--default-pip"])
            if proc.returncode != 0:
                fail("the venv has no pip and ensurepip failed", proc)
        probe = run([python, "-c", PROBE, wheel])
        missing = probe.stdout.strip() if probe.returncode == 0 else "unknown (probe failed)"
        pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q"]
        if not missing:
            proc = run(pip + ["--no-deps", "--force-reinstall", wheel])
        else:
            proc = run(pip + [wheel + "[train]"])
        if proc.returncode != 0:
            fail(f"pip install failed (missing before: {missing or 'nothing'})", proc)
        with open(marker, "w") as f:
            f.write(os.path.basename(wheel) + "\n")
        prune(os.path.dirname(wheel), keep=3)
        print(json.dumps({"python": python, "action": "installed", "deps": "present" if not missing else missing}))


main()
