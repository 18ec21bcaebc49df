"""Build a wheel of the running launchpad code, cached by content hash (for `sync` to push to hosts).

The wheel is assembled directly (a wheel is a zip with a dist-info folder): the files of the imported
`launchpad` package as they are now, plus the installed distribution's metadata (dependencies, extras,
entry points). No build backend, no network, ~0.1 s, byte-for-byte reproducible, and it works the same
for an editable checkout and a regular install. The version gets a local label with the content hash
(``0.1.0+g1a2b3c4d5e6f``), so a host's venv can tell whether it already has exactly this code.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import zipfile
from pathlib import Path

_SKIP_SUFFIXES = (".pyc", ".pyo", ".tmp", ".swp", ".orig", ".rej", "~")
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same content gives the same bytes


def package_files(package_dir: Path) -> list[Path]:
    """Files that belong in the wheel: everything under the package but caches, editor and temp files."""
    out = []
    for path in sorted(package_dir.rglob("*")):
        rel = path.relative_to(package_dir)
        if not path.is_file() or any(part == "__pycache__" or part.startswith(".") for part in rel.parts):
            continue
        if path.name.endswith(_SKIP_SUFFIXES):
            continue
        out.append(path)
    return out


def _metadata(dist_name: str, package_dir: Path) -> tuple[str, str, str]:
    """(version, METADATA text, entry_points.txt text): from the pyproject.toml beside the package (a
    source checkout: the current code's own declaration), else from the installed distribution."""
    pyproject = package_dir.parent / "pyproject.toml"
    if pyproject.is_file():
        try:
            return _from_pyproject(pyproject, dist_name)
        except (ImportError, KeyError, ValueError):
            pass  # Python 3.10 has no tomllib, or the file is not this package's: use the installed one
    from importlib import metadata

    for dist in metadata.distributions(name=dist_name):
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
        if "Requires-Dist" in text:  # skip stale egg-info stubs that lack the dependencies
            return dist.version, text, dist.read_text("entry_points.txt") or ""
    import launchpad

    version = getattr(launchpad, "__version__", "0.0.0")
    return version, f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: {version}\n", ""


def _from_pyproject(path: Path, dist_name: str) -> tuple[str, str, str]:
    import importlib

    tomllib = importlib.import_module("tomllib")  # Python 3.11+; ImportError on 3.10 (the caller falls back)

    project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
    if project["name"] != dist_name:
        raise ValueError(f"{path} declares {project['name']}")
    version = project["version"]
    lines = ["Metadata-Version: 2.1", f"Name: {dist_name}", f"Version: {version}"]
    if project.get("description"):
        lines.append(f"Summary: {project['description']}")
    if project.get("requires-python"):
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {req}" for req in project.get("dependencies", [])]
    for extra, reqs in sorted(project.get("optional-dependencies", {}).items()):
        lines.append(f"Provides-Extra: {extra}")
        for req in reqs:
            req, _, marker = req.partition(";")
            marker = f"({marker.strip()}) and extra == \"{extra}\"" if marker.strip() else f"extra == \"{extra}\""
            lines.append(f"Requires-Dist: {req.strip()}; {marker}")
    groups = {"console_scripts": project.get("scripts", {}), **project.get("entry-points", {})}
    entry_points = "".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in sorted(items.items())) + "\n"
        for group, items in sorted(groups.items()) if items
    )
    return version, "\n".join(lines) + "\n", entry_points


def content_hash(package_dir: Path, extra: bytes = b"") -> str:
    h = hashlib.sha256(extra)
    for path in package_files(package_dir):
        rel = path.relative_to(package_dir).as_posix().encode()
        data = path.read_bytes()
        h.update(len(rel).to_bytes(4, "big") + rel + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def build_wheel(out_dir: str | os.PathLike | None = None, *, package_dir: str | os.PathLike | None = None,
                dist_name: str = "launchpad") -> Path:
    """The path of a wheel of `package_dir` (default: the imported launchpad package) in `out_dir`
    (default: ``<cache dir>/wheels``). Built only when no wheel with this content hash exists there."""
    if package_dir is None:
        import launchpad

        package_dir = Path(launchpad.__file__).resolve().parent
    package_dir = Path(package_dir)
    if out_dir is None:
        from .settings import cache_dir

        out_dir = cache_dir() / "wheels"
    out_dir = Path(out_dir)
    base_version, meta, entry_points = _metadata(dist_name, package_dir)
    digest = content_hash(package_dir, (meta + "\0" + entry_points).encode())[:12]
    version = f"{base_version.split('+')[0]}+g{digest}"
    norm = dist_name.replace("-", "_")
    wheel = out_dir / f"{norm}-{version}-py3-none-any.whl"
    if wheel.exists():
        return wheel
    out_dir.mkdir(parents=True, exist_ok=True)
    info = f"{norm}-{version}.dist-info"
    meta = _with_version(meta, version)
    top = package_dir.name
    entries: list[tuple[str, bytes]] = [(f"{top}/{p.relative_to(package_dir).as_posix()}", p.read_bytes())
                                        for p in package_files(package_dir)]
    entries.append((f"{info}/METADATA", meta.encode()))
    entries.append((f"{info}/WHEEL",
                    b"Wheel-Version: 1.0\nGenerator: launchpad.wheel\nRoot-Is-Purelib: true\nTag: py3-none-any\n"))
    if entry_points:
        entries.append((f"{info}/entry_points.txt", entry_points.encode()))
    record = "".join(f"{name},sha256={_b64(hashlib.sha256(data).digest())},{len(data)}\n" for name, data in entries)
    record += f"{info}/RECORD,,\n"
    entries.append((f"{info}/RECORD", record.encode()))
    tmp = wheel.with_name(f".{wheel.name}.{os.getpid()}.{threading.get_ident():x}.tmp")  # per thread: nodes sync in parallel
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            zi = zipfile.ZipInfo(name, date_time=_EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(tmp, wheel)  # atomic: a concurrent builder of the same content writes the same bytes
    _prune(out_dir, f"{norm}-*-py3-none-any.whl", keep=KEEP)
    return wheel


KEEP = 5  # wheels of earlier code versions kept in the cache


def _prune(folder: Path, pattern: str, keep: int) -> None:
    """Delete all but the `keep` newest files matching `pattern` (each code edit makes a new wheel)."""
    old = sorted(folder.glob(pattern), key=lambda p: p.stat().st_mtime, reverse=True)[keep:]
    for path in old:
        path.unlink(missing_ok=True)


def _with_version(meta: str, version: str) -> str:
    lines = meta.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Version:"):
            lines[i] = f"Version: {version}"
            break
        if not line.strip():  # end of the headers: no Version header at all
            lines.insert(i, f"Version: {version}")
            break
    else:
        lines.append(f"Version: {version}")
    return "\n".join(lines) + "\n"


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")
