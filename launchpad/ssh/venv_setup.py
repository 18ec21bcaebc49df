"""Prepare launchpad's virtualenv on a host: ``PYTHON - CONFIG.json < venv_setup.py`` (source on stdin).

Runs ON the host before launchpad is installed there, so it is one stdlib-only file that the client
sends over the SSH channel. CONFIG.json (written by `VMProvider._sync`, 0600 in the job's directory):

    {"venv": ..., "wheel": <launchpad wheel on the host>, "extras": ["train", ...], "root": <launchpad root>,
     "installer": "auto"|"uv"|"pip", "index": {"index_url", "extra_index_urls", "find_links"} (optional),
     "cache": {"key": ..., "dir": <a file:// store's folder of this key> | null,
               "urls": {file name: presigned URL} | null, "index": <its INDEX.json> | null,
               "readable": bool, "ask": true when the client has not looked in the store yet},
     "check": {"out": <env.json>, "spec": <job.json>} | null}

It prints one JSON line: {"python", "action": "reused"|"installed", "deps", "installer", "source",
"seconds": {...}, "wheelhouse": {...} | absent}; or exits 10 ({"need": "cache"}) when a full install is
needed and the cache says "ask": the client then reads the store (a round trip only bare hosts pay) and
runs it again with the index and presigned URLs.

- reuse: VENV/bin/python runs and VENV/.launchpad-wheel names this very wheel and extras -> nothing to do;
- create: ``PYTHON -m venv --system-site-packages`` and a ``.pth`` that also links PYTHON's own
  site-packages (when PYTHON is itself a venv or conda env with torch, those are not "system"
  packages), so a host's preinstalled CUDA/torch stack (Deep Learning AMI, Lambda Stack, the
  RunPod/Vast PyTorch images) is reused instead of downloaded again;
- install: when every requirement of launchpad and its extras is already satisfied (checked against
  the wheel's own metadata with pip's vendored `packaging`), only the wheel, without dependencies
  (uv when there is one: ~0.1 s, else pip); when the heavy part (torch) is there but something else is
  missing, pip (it sees the linked site-packages; uv would download torch again); otherwise the whole
  stack with uv (found on the host, taken from the wheel cache, or fetched once into ROOT/tools/uv),
  falling back to pip:
    * from the wheel cache when it is complete for this key (the job's object store, under
      ``_cache/wheels/<key>/``: a file:// store's folder in place, else downloaded in parallel from
      presigned URLs into ROOT/wheelhouse/<key>/): ``--no-index --find-links``, no index is contacted;
    * else resolved by uv (``uv pip compile --format pylock.toml``), the wheels downloaded in parallel
      into ROOT/wheelhouse/<key>/ (sdists built into wheels there), installed from that folder. The
      folder is reported as "wheelhouse" and the agent uploads it to the store (INDEX.json last) while
      the job runs, so the next instance of the job installs from there.
- check: the environment check (``python -m launchpad.train.envcheck``) in the venv: records env.json
  and fails in seconds when the recipe cannot run with this stack (exit 3, its one line on stderr).
uv does not read pip's configuration: the host's pip index settings (pip.conf, PIP_INDEX_URL, ...)
are passed to it, so a host with a mirror configured for pip uses that mirror with uv too.
A lock file serialises concurrent set-ups of the same venv.
"""

import configparser
import fcntl
import json
import os
import re
import shutil
import site
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile

UV_MIN = (0, 8)  # `uv pip compile --format pylock.toml`
UV_REQUIREMENT = "uv>=0.8"
CACHE_INDEX = "INDEX.json"
NEED_CACHE = 10  # exit code: "a full install is needed: give me the wheel cache's index and URLs"
FETCH_WORKERS = 8

PROBE = r"""
import sys, zipfile
from importlib import metadata
try:
    from pip._vendor.packaging.requirements import Requirement
except ImportError:
    from packaging.requirements import Requirement
wheel, extras = sys.argv[1], [e for e in sys.argv[2].split(",") if e]
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
missing, present = [], []
for line in lines:
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in extras + [""]):
        continue
    try:
        version = metadata.version(req.name)
    except metadata.PackageNotFoundError:
        missing.append(req.name)
        continue
    if req.specifier and not req.specifier.contains(version, prereleases=True):
        missing.append(f"{req.name}=={version} ({req.specifier})")
    else:
        present.append(req.name)
print(",".join(missing))
print(",".join(present))
"""


def run(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def fail(message, proc=None, code=1):
    tail = ""
    if proc is not None:
        tail = " | ".join((proc.stderr or proc.stdout or "").strip().splitlines()[-5:])
    sys.stderr.write(f"venv setup: {message}{': ' + tail if tail else ''}\n")
    sys.exit(code)


def note(message):
    sys.stderr.write(f"venv setup: {message}\n")


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


class Timer:
    def __init__(self):
        self.seconds = {}

    def __call__(self, name):
        timer = self

        class Span:
            def __enter__(self):
                self.t0 = time.monotonic()

            def __exit__(self, *exc):
                timer.seconds[name] = round(timer.seconds.get(name, 0.0) + time.monotonic() - self.t0, 3)

        return Span()


# -- the index: pip's settings, for uv too -----------------------------------------------------------------
def pip_index_settings():
    """pip's index settings on this host (config files in pip's order, then PIP_* variables)."""
    files = ["/etc/xdg/pip/pip.conf", "/etc/pip.conf", os.path.expanduser("~/.pip/pip.conf"),
             os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "pip", "pip.conf"),
             os.path.join(sys.prefix, "pip.conf")]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(os.environ["PIP_CONFIG_FILE"])
    out: dict = {"index_url": None, "extra_index_urls": [], "find_links": [], "no_index": False, "cert": None}
    parser = configparser.RawConfigParser()
    try:
        parser.read([f for f in files if os.path.isfile(f)])
    except configparser.Error:
        pass
    for section in ("global", "install"):
        if not parser.has_section(section):
            continue
        values = dict(parser.items(section))
        out["index_url"] = values.get("index-url") or out["index_url"]
        if values.get("extra-index-url"):
            out["extra_index_urls"] = values["extra-index-url"].split()
        if values.get("find-links"):
            out["find_links"] = values["find-links"].split()
        if values.get("no-index", "").lower() in ("1", "true", "yes", "on"):
            out["no_index"] = True
        out["cert"] = values.get("cert") or out["cert"]
    env = os.environ
    out["index_url"] = env.get("PIP_INDEX_URL") or out["index_url"]
    if env.get("PIP_EXTRA_INDEX_URL"):
        out["extra_index_urls"] = env["PIP_EXTRA_INDEX_URL"].split()
    if env.get("PIP_FIND_LINKS"):
        out["find_links"] = env["PIP_FIND_LINKS"].split()
    out["cert"] = env.get("PIP_CERT") or out["cert"]
    return out


def index_args(given, installer):
    """Index arguments: the client's (`index` in the config) win; else, for uv, pip's settings here
    (unless uv has its own UV_* ones). pip reads its own configuration itself."""
    given = given or {}
    if not any(given.get(k) for k in ("index_url", "extra_index_urls", "find_links")):
        if installer != "uv" or any(k in os.environ for k in ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX",
                                                              "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS")):
            return []
        given = pip_index_settings()
    args = []
    if given.get("index_url"):
        args += ["--index-url", given["index_url"]]
    for url in given.get("extra_index_urls") or []:
        args += ["--extra-index-url", url]
    for url in given.get("find_links") or []:
        args += ["--find-links", url]
    if given.get("no_index"):
        args.append("--no-index")
    if installer == "uv" and (given.get("extra_index_urls") or given.get("find_links")):
        args += ["--index-strategy", "unsafe-best-match"]  # pip's rule: the best version on any of them
    return args


# -- uv ----------------------------------------------------------------------------------------------------
def uv_version(path):
    try:
        out = run([path, "--version"], timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.match(r"uv (\d+)\.(\d+)(?:\.(\d+))?", out.strip())
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def extract_uv(wheel, dest_dir):
    """The uv binary out of its wheel (a zip): no pip needed."""
    with zipfile.ZipFile(wheel) as z:
        name = next((n for n in z.namelist() if n.endswith(".data/scripts/uv")), None)
        if name is None:
            return None
        os.makedirs(dest_dir, exist_ok=True)
        tmp = os.path.join(dest_dir, f".uv.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(z.read(name))
        os.chmod(tmp, 0o755)
        path = os.path.join(dest_dir, "uv")
        os.replace(tmp, path)
        return path


def find_uv(root, cache_files, fetch):
    """(path to a usable uv, its wheel file if it came as one) or (None, None)."""
    tools = os.path.join(root, "tools", "uv")
    home = os.path.expanduser("~")
    for path in (os.path.join(tools, "uv"), shutil.which("uv"), os.path.join(home, ".local", "bin", "uv"),
                 os.path.join(home, ".cargo", "bin", "uv"), os.path.join(os.path.dirname(sys.executable), "uv")):
        if path and os.path.isfile(path) and (uv_version(path) or (0,)) >= UV_MIN:
            wheel = next((os.path.join(tools, n) for n in sorted(os.listdir(tools))
                          if n.startswith("uv-") and n.endswith(".whl")), None) if path.startswith(tools) else None
            return path, wheel
    if not fetch:
        return None, None
    wheel = next((f for f in cache_files if os.path.basename(f).startswith("uv-")), None)
    if wheel is None and run([sys.executable, "-c", "import pip"]).returncode == 0:
        dl = os.path.join(tools, "dl")
        proc = run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--no-input", "-q",
                    "--no-deps", "--only-binary", ":all:", "-d", dl, UV_REQUIREMENT], timeout=600)
        found = [os.path.join(dl, n) for n in os.listdir(dl)] if os.path.isdir(dl) else []
        wheel = next((f for f in found if os.path.basename(f).startswith("uv-") and f.endswith(".whl")), None)
        if proc.returncode != 0 or wheel is None:
            note("could not fetch uv from the index; installing with pip")
            return None, None
    if wheel is None:
        return None, None
    os.makedirs(tools, exist_ok=True)
    kept = os.path.join(tools, os.path.basename(wheel))
    if os.path.abspath(wheel) != os.path.abspath(kept):
        shutil.copyfile(wheel, kept)
    path = extract_uv(kept, tools)
    return (path, kept) if path and uv_version(path) else (None, None)


# -- the wheel cache ---------------------------------------------------------------------------------------
def copy_or_download(source, dest, size=None):
    """`source` (a path or a URL: file://, https://, a presigned store URL) -> `dest`, atomically;
    skipped when `dest` already has `size` bytes (a warm host, or a retry)."""
    if size is not None and os.path.exists(dest) and os.path.getsize(dest) == size:
        return dest
    tmp = f"{dest}.{os.getpid()}.{threading.get_ident()}.tmp"
    try:
        if "://" not in source:
            shutil.copyfile(source, tmp)
        else:
            with urllib.request.urlopen(source, timeout=120) as resp, open(tmp, "wb") as out:
                shutil.copyfileobj(resp, out, 1 << 20)
        if size is not None and os.path.getsize(tmp) != size:
            raise OSError(f"{os.path.basename(dest)}: got {os.path.getsize(tmp)} bytes, expected {size}")
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


def fetch_all(jobs):
    """[(source, dest, size)] in parallel; the first error is raised."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(FETCH_WORKERS) as pool:
        return list(pool.map(lambda j: copy_or_download(*j), jobs))


def cache_index(cache):
    """The cache's INDEX.json for this key (a complete cache), or None."""
    if cache.get("index"):
        return cache["index"]
    if cache.get("dir"):
        try:
            with open(os.path.join(cache["dir"], CACHE_INDEX)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None
    return None


def fetch_cache(cache, wheelhouse):
    """A complete wheel cache for this key: (its wheel files, the folder to install from), or
    (None, wheelhouse). A file:// store's folder is used in place (no copy); a store's presigned
    URLs are downloaded into `wheelhouse` in parallel."""
    index = cache_index(cache)
    if not index or not index.get("complete") or not index.get("files"):
        return None, wheelhouse
    urls = cache.get("urls") or {}
    jobs = []
    for f in index["files"]:
        name = f["name"]
        if os.path.basename(name) != name:
            return None, wheelhouse
        if cache.get("dir"):
            path = os.path.join(cache["dir"], name)
            if not os.path.isfile(path) or (f.get("size") is not None and os.path.getsize(path) != f["size"]):
                note(f"the wheel cache in {cache['dir']} lacks {name}; installing from the index")
                return None, wheelhouse
            jobs.append(path)
        elif urls.get(name):
            jobs.append((urls[name], os.path.join(wheelhouse, name), f.get("size")))
        else:
            return None, wheelhouse
    if cache.get("dir"):
        return jobs, cache["dir"]
    try:
        return fetch_all(jobs), wheelhouse
    except OSError as e:
        note(f"the wheel cache could not be read ({e}); installing from the index")
        return None, wheelhouse


def pick_wheel(wheels, python):
    """One wheel of several for the venv's interpreter (uv lists only matching ones for a given
    --python, so this is rare): the first whose tags the interpreter supports."""
    if len(wheels) == 1:
        return wheels[0]
    code = ("import sys\ntry:\n from pip._vendor.packaging.tags import sys_tags\nexcept ImportError:\n"
            " from packaging.tags import sys_tags\nprint('\\n'.join(str(t) for t in sys_tags()))")
    proc = run([python, "-c", code])
    supported = proc.stdout.split() if proc.returncode == 0 else []
    for rank_tag in supported:
        for w in wheels:
            name = w["url"].rsplit("/", 1)[-1].split("#")[0]
            parts = name[:-4].split("-")
            tags = {f"{i}-{a}-{p}" for i in parts[-3].split(".") for a in parts[-2].split(".") for p in parts[-1].split(".")}
            if rank_tag in tags:
                return w
    return None


def resolve_to_wheelhouse(uv, python, requirement, wheelhouse, index, env, timer):
    """uv resolves (pylock.toml), the wheels go into `wheelhouse` (sdists built there).
    -> (complete, problem): complete when every package but launchpad is a wheel in the folder."""
    try:
        import importlib

        tomllib = importlib.import_module("tomllib")  # Python 3.11+
    except ImportError:
        return False, "no tomllib on this Python (< 3.11): the wheel cache needs 3.11"
    work = os.path.join(wheelhouse, ".resolve")
    os.makedirs(work, exist_ok=True)
    req_in, lock = os.path.join(work, "requirements.in"), os.path.join(work, "pylock.toml")
    with open(req_in, "w") as f:
        f.write(requirement + "\n")
    with timer("resolve"):
        proc = run([uv, "pip", "compile", "--quiet", "--python", python, "--format", "pylock.toml", "-o", lock,
                    *index, req_in], env=env)
    if proc.returncode != 0:
        return False, "uv could not resolve: " + " | ".join(proc.stderr.strip().splitlines()[-3:])
    with open(lock, "rb") as f:
        packages = tomllib.load(f).get("packages", [])
    jobs, sdists, problems = [], [], []
    for p in packages:
        if p.get("name") == "launchpad":
            continue
        if p.get("wheels"):
            w = pick_wheel(p["wheels"], python)
            if w is None:
                problems.append(f"{p['name']}: no wheel for this interpreter")
                continue
            name = w["url"].rsplit("/", 1)[-1].split("#")[0]
            jobs.append((w["url"], os.path.join(wheelhouse, urllib.request.url2pathname(name)), w.get("size")))
        elif p.get("sdist", {}).get("url"):
            sdists.append(p)
        else:
            problems.append(f"{p.get('name')}: neither a wheel nor an sdist in the index")
    with timer("fetch"):
        try:
            fetch_all(jobs)
        except OSError as e:
            return False, f"downloading the wheels failed: {e}"
    with timer("build"):
        for p in sdists:
            url = p["sdist"]["url"]
            dest = os.path.join(work, urllib.request.url2pathname(url.rsplit("/", 1)[-1].split("#")[0]))
            try:
                copy_or_download(url, dest, p["sdist"].get("size"))
            except OSError as e:
                problems.append(f"{p['name']}: {e}")
                continue
            proc = run([uv, "build", "--quiet", "--wheel", "--python", python, "-o", wheelhouse, *index, dest], env=env)
            if proc.returncode != 0:
                problems.append(f"{p['name']}: building its wheel failed")
    return not problems, "; ".join(problems)


def wheelhouse_files(wheelhouse):
    out = []
    for name in sorted(os.listdir(wheelhouse)):
        path = os.path.join(wheelhouse, name)
        if name.endswith(".whl") and os.path.isfile(path) and not name.startswith("launchpad-"):
            out.append({"name": name, "size": os.path.getsize(path)})
    return out


# -- main --------------------------------------------------------------------------------------------------
def create_venv(venv, python):
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


def ensure_pip(python):
    if run([python, "-c", "import pip"]).returncode != 0:
        proc = run([python, "-m", "ensurepip", "--default-pip"])
        if proc.returncode != 0:
            fail("the venv has no pip and ensurepip failed", proc)


def install(cfg, python, wheel, missing, present, timer, result):
    """Install launchpad (and what is missing of its stack) into the venv; fills `result`."""
    extras = cfg.get("extras") or []
    requirement = f"launchpad[{','.join(extras)}] @ file://{wheel}" if extras else f"launchpad @ file://{wheel}"
    root, cache, choice = cfg["root"], cfg.get("cache") or {}, cfg.get("installer", "auto")
    env = dict(os.environ, UV_CACHE_DIR=os.path.join(root, "cache", "uv"), UV_PYTHON_DOWNLOADS="never",
               UV_NO_PROGRESS="1")
    cert = pip_index_settings()["cert"]
    if cert and os.path.isfile(cert) and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = cert  # pip's CA bundle (a TLS-inspecting proxy's): uv and our downloads use it too
        os.environ["SSL_CERT_FILE"] = cert
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q"]
    uv = None
    if not missing:
        result["deps"] = "present"
        if choice != "pip":
            uv, _ = find_uv(root, [], fetch=False)
        with timer("install"):
            if uv:
                result["installer"] = "uv"
                proc = run([uv, "pip", "install", "--quiet", "--python", python, "--no-deps", "--reinstall", wheel], env=env)
            else:
                ensure_pip(python)
                result["installer"] = "pip"
                proc = run(pip + ["--no-deps", "--force-reinstall", wheel])
        if proc.returncode != 0:
            fail("installing the launchpad wheel failed", proc)
        result["source"] = "host"
        return
    result["deps"] = missing
    if "torch" in present and choice != "uv":
        # the heavy part is here (linked from the host's python): pip sees it and adds only what is missing
        ensure_pip(python)
        result["installer"], result["source"] = "pip", "index"
        with timer("install"):
            proc = run(pip + [wheel + (f"[{','.join(extras)}]" if extras else "")])
        if proc.returncode != 0:
            fail(f"pip install failed (missing before: {missing})", proc)
        return
    if cache.get("ask"):  # only now is the store's cache needed: the client reads it and runs us again
        print(json.dumps({"need": "cache"}))
        sys.exit(NEED_CACHE)
    key = cache.get("key") or "nokey"
    wheelhouse = os.path.join(root, "wheelhouse", key)
    os.makedirs(wheelhouse, exist_ok=True)
    with timer("cache"):
        cached, links = fetch_cache(cache, wheelhouse) if cache else (None, wheelhouse)
    if choice != "pip":
        with timer("uv"):
            uv, uv_wheel = find_uv(root, cached or [], fetch=True)
        if uv and uv_wheel and not cached:
            shutil.copyfile(uv_wheel, os.path.join(wheelhouse, os.path.basename(uv_wheel)))  # cached with the rest
    if uv is None:
        ensure_pip(python)
        result["installer"] = "pip"
        result["source"] = "cache" if cached else "index"
        with timer("install"):
            target = wheel + (f"[{','.join(extras)}]" if extras else "")
            proc = run(pip + (["--no-index"] if cached else []) + ["--find-links", links, target])
        if proc.returncode != 0:
            fail(f"pip install failed (missing before: {missing})", proc)
        return
    result["installer"] = "uv " + ".".join(map(str, uv_version(uv) or ()))
    index = index_args(cfg.get("index"), "uv")
    if cached:
        with timer("install"):
            proc = run([uv, "pip", "install", "--quiet", "--python", python, "--no-index", "--find-links", links,
                        requirement], env=env)
        if proc.returncode == 0:
            result["source"] = "cache"
            shutil.rmtree(wheelhouse, ignore_errors=True)  # installed (uv keeps what it needs): nothing to upload
            return
        note("installing from the wheel cache failed; using the index: " + " | ".join(proc.stderr.strip().splitlines()[-2:]))
    if not cache.get("readable"):  # no cache to fill: uv straight from the index (no wheel files kept)
        with timer("install"):
            proc = run([uv, "pip", "install", "--quiet", "--python", python, *index, requirement], env=env)
        if proc.returncode != 0:
            fail(f"uv pip install failed (missing before: {missing})", proc)
        result["source"] = "index"
        shutil.rmtree(wheelhouse, ignore_errors=True)
        return
    complete, problem = resolve_to_wheelhouse(uv, python, requirement, wheelhouse, index, env, timer)
    if problem:
        note(f"wheel cache: {problem}")
    with timer("install"):
        argv = [uv, "pip", "install", "--quiet", "--python", python, "--find-links", wheelhouse]
        proc = run(argv + (["--no-index"] if complete else index) + [requirement], env=env)
    if proc.returncode != 0:
        fail(f"uv pip install failed (missing before: {missing})", proc)
    result["source"] = "index"
    shutil.rmtree(os.path.join(wheelhouse, ".resolve"), ignore_errors=True)
    files = wheelhouse_files(wheelhouse)
    # the agent uploads these to the job's store and then deletes the folder
    result["wheelhouse"] = {"dir": wheelhouse, "key": key, "complete": complete, "files": files,
                            "bytes": sum(f["size"] for f in files)}


def check(cfg, python, timer, result):
    spec = cfg.get("check")
    if not spec:
        return
    argv = [python, "-m", "launchpad.train.envcheck", "--out", spec["out"]]
    if spec.get("spec"):
        argv += ["--spec", spec["spec"]]
    with timer("check"):
        # env.json is in the job's private tree: 0600 like the rest of it
        proc = run(argv, env=dict(os.environ, HF_HUB_OFFLINE="1"), preexec_fn=lambda: os.umask(0o077))
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        fail(f"the environment check failed: {lines[-1] if lines else proc.returncode}", code=3)
    result["checked"] = True


def main():
    if sys.version_info < (3, 10):
        fail(f"launchpad needs Python >= 3.10 on the host; {sys.executable} is {sys.version.split()[0]} "
             "(set `python:` in hosts.yaml to a newer interpreter)")
    t0 = time.monotonic()
    with open(sys.argv[1]) as f:
        cfg = json.load(f)
    venv, wheel, extras = cfg["venv"], cfg["wheel"], cfg.get("extras") or []
    python = os.path.join(venv, "bin", "python")
    marker = os.path.join(venv, ".launchpad-wheel")
    stamp = f"{os.path.basename(wheel)} {','.join(extras)}"
    timer = Timer()
    result: dict = {"python": python}
    os.makedirs(os.path.dirname(venv), exist_ok=True)
    with open(venv + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        reused = False
        with timer("venv"):
            if works(python):
                try:
                    with open(marker) as f:
                        reused = f.read().strip() == stamp
                except OSError:
                    pass
            else:
                create_venv(venv, python)
        if reused:
            result["action"] = "reused"
        else:
            with timer("probe"):
                probe = run([python, "-c", PROBE, wheel, ",".join(extras)])
            lines = probe.stdout.splitlines() if probe.returncode == 0 else []
            missing = lines[0].strip() if lines else "unknown (probe failed)"
            present = lines[1].strip().split(",") if len(lines) > 1 else []
            try:
                install(cfg, python, wheel, missing, present, timer, result)
            except SystemExit:  # no half-made venv: the helpers' guard must see "not synced" (exit 99)
                shutil.rmtree(venv, ignore_errors=True)
                raise
            with open(marker, "w") as f:
                f.write(stamp + "\n")
            prune(os.path.dirname(wheel), keep=3)
            result["action"] = "installed"
        check(cfg, python, timer, result)
    timer.seconds["total"] = round(time.monotonic() - t0, 3)
    result["seconds"] = timer.seconds
    print(json.dumps(result))


main()
