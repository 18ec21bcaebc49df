"""The wheel cache: the wheels a bare host installed, kept in the job's object store for the next instance.

A host whose Python has no training stack installs it once per job store and key (`launchpad.ssh.venv_setup`
resolves with uv and downloads the wheels into ``<root>/wheelhouse/<key>/`` before installing from
there). The agent then uploads that folder to the store the job's checkpoints go to, while the job runs::

    <checkpoint.uri>/_cache/wheels/<key>/<name>.whl     every wheel installed (torch, CUDA libraries, uv ...)
    <checkpoint.uri>/_cache/wheels/<key>/INDEX.json     last: {"key", "fields", "complete", "files": [...]}

A cache without INDEX.json does not exist (an upload cut short is never half-used). The next instance of
the job (a resume after a preemption, a second run on another host) copies the files to its own wheelhouse
and installs with ``--no-index --find-links``: no index is contacted, and in a cloud region the store is
usually much closer than PyPI. The key hashes what decides which wheels fit: the interpreter (implementation,
version, platform, libc) and launchpad's requirements for the chosen extras (`cache_key`); a stale cache is
dropped by deleting ``_cache/wheels/``.

Reading happens on the host before launchpad is installed there, so without an SDK: a file:// store is a
folder on the host, and a store that can presign (S3) gets presigned GET URLs made by the client (which
holds the credentials). Other stores are written but not read yet.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

CACHE_PREFIX = "_cache/wheels"
INDEX = "INDEX.json"
#: in the job's work directory on the instance: the wheelhouse the agent is to upload ({"dir", "key", ...})
PENDING_FILE = "wheel-cache.json"
#: the host facts the key is made of, printed by `HOST_PROBE` (run with the host's python)
HOST_PROBE = (
    "import json, platform, sys, sysconfig; "
    "print(json.dumps({'impl': sys.implementation.name, 'version': '%d.%d' % sys.version_info[:2], "
    "'platform': sysconfig.get_platform(), 'libc': ' '.join(platform.libc_ver())}))"
)
log = logging.getLogger("launchpad.wheelcache")
_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


def requirement_lines(wheel: Path, extras: Iterable[str]) -> list[str]:
    """The wheel's Requires-Dist lines that apply with `extras` (sorted): what the cache must satisfy."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    wanted = set(extras)
    out = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        req = line.split(":", 1)[1].strip()
        named = set(_EXTRA.findall(req))
        if not named or named & wanted:
            out.append(req)
    return sorted(out)


def cache_key(host: dict[str, Any], requirements: list[str]) -> str:
    fields = {"host": {k: host.get(k) for k in ("impl", "version", "platform", "libc")}, "requires": requirements}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def key_prefix(key: str) -> str:
    return f"{CACHE_PREFIX}/{key}"


def read_index(store, key: str) -> dict[str, Any] | None:
    """The INDEX.json of a complete cache for `key`, or None."""
    from .errors import StorageError

    try:
        index = json.loads(store.get_bytes(f"{key_prefix(key)}/{INDEX}"))
    except (StorageError, ValueError):
        return None
    return index if isinstance(index, dict) and index.get("complete") and index.get("files") else None


def source_for(checkpoint_uri: str | None, key: str, *, look: bool = True) -> dict[str, Any]:
    """What `venv_setup` gets as its "cache": where the host reads the cache for `key` from.

    - file:// (a path on the host): the folder; the host reads INDEX.json itself;
    - a store that presigns (S3): the index read here and a presigned URL per file, when complete;
      without `look`, only ``"ask": True`` (venv_setup asks back when it needs a full install, so a host
      that has its stack costs no store round trip and no SDK import here);
    - else (or when this client cannot open the store): only the key (nothing to read).
    "readable": whether a cache written there could be read back this way (else none is written)."""
    out: dict[str, Any] = {"key": key, "readable": False}
    if not checkpoint_uri:
        return out
    if checkpoint_uri.startswith("file://"):
        from .storage.file import path_of_file_uri

        out.update(dir=str(path_of_file_uri(checkpoint_uri) / key_prefix(key)), readable=True)
        return out
    if not look:
        return {**out, "ask": True}
    from .errors import LaunchpadError
    from .storage import open_store

    try:
        store = open_store(checkpoint_uri)
        if store.presigned_get(f"{key_prefix(key)}/{INDEX}") is None:
            return out
        out["readable"] = True
        index = read_index(store, key)
        if index is None:
            return out
        urls = {f["name"]: store.presigned_get(f"{key_prefix(key)}/{f['name']}") for f in index["files"]}
    except (LaunchpadError, ImportError) as e:
        log.info("wheel cache: cannot read %s from here (%s)", checkpoint_uri, e)
        return out
    out.update(index=index, urls=urls)
    return out


def upload(store, pending: dict[str, Any], log: Callable[[str], None] = print,
           stop: Callable[[], bool] = lambda: False) -> dict[str, Any]:
    """Put the wheelhouse `pending` names (``{"dir", "key", "files", "complete"}``) into `store`, files
    first (a file already there with the same size is kept), INDEX.json last, and only when the
    wheelhouse is complete. Returns a summary for status.json."""
    key, folder = pending["key"], Path(pending["dir"])
    prefix = key_prefix(key)
    t0 = time.monotonic()
    if read_index(store, key) is not None:
        return {"state": "present", "key": key}
    if not pending.get("complete"):
        return {"state": "skipped", "key": key, "reason": "the wheelhouse is not complete (see the sync log)"}
    have = {o.key: o.size for o in store.list(prefix + "/")}
    files, sent = [], 0
    for f in pending["files"]:
        if stop():
            return {"state": "stopped", "key": key}
        path = folder / f["name"]
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        size = path.stat().st_size
        if have.get(f"{prefix}/{f['name']}") != size:
            store.put_file(path, f"{prefix}/{f['name']}")
            sent += size
        files.append({"name": f["name"], "size": size, "sha256": digest.hexdigest()})
    index = {"key": key, "complete": True, "files": files, "created_at": time.time(),
             "fields": pending.get("fields"), "installer": pending.get("installer")}
    store.put_bytes(f"{prefix}/{INDEX}", json.dumps(index, indent=1).encode())
    seconds = round(time.monotonic() - t0, 2)
    log(f"wheel cache: {len(files)} wheels ({sent / 2**20:.0f} MiB sent) in {store.uri(prefix)} in {seconds}s")
    return {"state": "done", "key": key, "files": len(files), "bytes_sent": sent, "seconds": seconds}
