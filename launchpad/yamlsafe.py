"""Read a small YAML file that a person wrote, safely and with one-line errors.

`yaml.safe_load` alone is not enough for user input: it keeps the last of duplicate keys silently,
hangs on a FIFO, happily reads a 2 GB file, and returns shared objects for aliases, so a 1 KB
"billion laughs" file turns into 10^9 values as soon as someone walks it (pydantic does). Here the
composed node graph is measured before anything is constructed: the expanded size (each alias counted
as many times as it is used) must stay under MAX_VALUES, the nesting under MAX_DEPTH, and every key
once per mapping. Benign anchors and merge keys (`<<: *defaults`) keep working.

Errors are `YamlError(problems)`, each problem one line without the file name (the caller adds it):
``line 4, column 7: invalid YAML: mapping values are not allowed here``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

MAX_BYTES = 256 << 10  # recipes are a few KB; the pure-Python parser reads 256 KiB in ~0.3 s, 1 MiB in ~1.3 s
MAX_VALUES = 10_000  # after alias expansion; a recipe has well under 1,000
MAX_DEPTH = 64
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlError(Exception):
    """The file cannot be read as YAML. `problems`: one line each, without the file name."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def read_text(path: str | os.PathLike, *, max_bytes: int = MAX_BYTES) -> str:
    """The file's text, or YamlError for a missing/unreadable/non-regular/over-large/binary/non-UTF-8 file."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise YamlError(["file not found"]) from None
    except PermissionError:
        raise YamlError(["cannot read the file (permission denied)"]) from None
    except OSError as e:
        raise YamlError([f"cannot read the file ({e.strerror or e})"]) from None
    if stat.S_ISDIR(st.st_mode):
        raise YamlError(["is a directory, not a file"])
    if not stat.S_ISREG(st.st_mode):  # a FIFO or a device would block or never end
        raise YamlError(["is not a regular file"])
    if st.st_size > max_bytes:
        raise YamlError([f"file is too large ({-(-st.st_size // 1024)} KiB; at most {max_bytes // 1024} KiB)"])
    try:
        with open(p, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise YamlError([f"cannot read the file ({e.strerror or e})"]) from None
    if len(data) > max_bytes:
        raise YamlError([f"file is too large (at most {max_bytes // 1024} KiB)"])
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise YamlError(["is UTF-16 text; save it as UTF-8"])
    if b"\x00" in data:
        raise YamlError(["is a binary file, not YAML text (it contains NUL bytes)"])
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        problem = f"line {line}: not UTF-8 text (byte {e.start}; is it a binary file? save it as UTF-8)"
        raise YamlError([problem]) from None


def _syntax_problem(e: yaml.YAMLError, text: str) -> str:
    if isinstance(e, yaml.MarkedYAMLError):
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = (e.problem or e.context or "syntax error").strip()
        if e.context and e.problem:
            what = f"{e.context.strip()}, {what}"
        return f"{where}invalid YAML: {what}"
    if isinstance(e, yaml.reader.ReaderError):
        where = f"line {text[: e.position].count(chr(10)) + 1}: " if isinstance(e.position, int) else ""
        code = e.character if isinstance(e.character, int) else ord(str(e.character)[:1] or "?")
        return f"{where}invalid YAML: control character U+{code:04X} is not allowed"
    return "invalid YAML: " + " ".join(str(e).split())[:200]


def _join(path: str, key: object) -> str:
    key_text = str(key)
    if not key_text.replace("_", "").replace("-", "").isalnum() or len(key_text) > 64:
        key_text = repr(key_text[:64])
    return f"{path}.{key_text}" if path else key_text


class _Loader(yaml.SafeLoader):
    """SafeLoader that stops composing after MAX_VALUES nodes: composing is the slow part (~15 us a node)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.composed = 0
        self.depth = 0

    def compose_node(self, parent, index):
        self.composed += 1
        self.depth += 1
        try:
            if self.composed > MAX_VALUES:
                raise YamlError([f"line {self._line()}: more than {MAX_VALUES} values; far more than a recipe needs"])
            if self.depth > MAX_DEPTH:
                raise YamlError([f"line {self._line()}: nested more than {MAX_DEPTH} levels deep"])
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def _line(self) -> int:
        return self.peek_event().start_mark.line + 1


class _Walk:
    def __init__(self) -> None:
        self.sizes: dict[int, int] = {}  # id(node) -> expanded size
        self.active: set[int] = set()  # nodes on the current path, to catch recursive aliases
        self.dups: list[str] = []
        self.aliased = False


def _measure(node: Node, path: str, depth: int, w: _Walk) -> int:
    """Expanded number of values under `node` (memoised by node, so shared aliases cost nothing to count)."""
    key = id(node)
    sizes, active, dups = w.sizes, w.active, w.dups
    if key in sizes:
        w.aliased = True
        return sizes[key]
    if key in active:
        raise YamlError([f"{path or 'top level'}: an alias refers to itself (recursive anchors are not allowed)"])
    if depth > MAX_DEPTH:
        raise YamlError([f"{path}: nested more than {MAX_DEPTH} levels deep"])
    active.add(key)
    total = 1
    if isinstance(node, MappingNode):
        first_line: dict[tuple[str, str], int] = {}
        for k, v in node.value:
            ident = (k.tag, k.value) if not isinstance(k.value, list) else None
            child = path
            if ident and k.tag != _MERGE_TAG:
                child = _join(path, k.value)
                line = k.start_mark.line + 1
                if ident in first_line:
                    first = first_line[ident]
                    dups.append(f"{child}: duplicate key on line {line} (first set on line {first}; keep one)")
                else:
                    first_line[ident] = line
            total += _measure(k, child, depth + 1, w)
            total += _measure(v, child, depth + 1, w)
    elif isinstance(node, SequenceNode):
        for i, v in enumerate(node.value):
            total += _measure(v, f"{path}[{i}]", depth + 1, w)
    active.discard(key)
    sizes[key] = total
    if total > MAX_VALUES:
        where = path or "top level"
        if w.aliased:
            raise YamlError([f"{where}: expands to more than {MAX_VALUES} values through aliases "
                             "(an alias bomb?); write the values out instead of using *aliases"])
        raise YamlError([f"{where}: has more than {MAX_VALUES} values; that is far more than a recipe needs"])
    return total


def parse_yaml(text: str) -> object:
    """One YAML document -> plain Python objects (None when there is none). Raises YamlError."""
    loader = None
    try:
        loader = _Loader(text)  # pure Python on purpose: libyaml's composer recurses in C without a limit
        node = loader.get_single_node()
        if node is None:
            return None
        walk = _Walk()
        _measure(node, "", 0, walk)
        if walk.dups:
            raise YamlError(walk.dups)
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        raise YamlError([_syntax_problem(e, text)]) from None
    except RecursionError:
        raise YamlError([f"nested more than {MAX_DEPTH} levels deep"]) from None
    finally:
        if loader is not None:
            loader.dispose()


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_yaml_mapping(path: str | os.PathLike, *, max_bytes: int = MAX_BYTES) -> dict:
    """Read `path` as a YAML mapping (the shape of every launchpad file). Raises YamlError."""
    data = parse_yaml(read_text(path, max_bytes=max_bytes))
    if data is None:
        raise YamlError(["file is empty (it needs keys like `name: my-run`)"])
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"a single value ({_brief(data)})"
        raise YamlError([f"top level must be a mapping of keys like `name: my-run`, not {kind}"])
    return data
