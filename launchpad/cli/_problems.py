"""`validate --json`: a RecipeError's one-line problems as records a script or an editor can use.

A problem line is ``<file>: <field>: <what> (<fix>)`` (launchpad.recipe, launchpad._recipe_errors) or, for
YAML that does not parse, ``<file>: line N, column M: <what>``. Reading the lines back here keeps one
source of truth for the wording; the line number of a field is looked up in the file's YAML node tree.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_FIELD = re.compile(r"^((?:[\w\-\[\]'.]+)(?:, [\w\-\[\]'.]+)*)(?: \(from override\))?: (.+)$", re.DOTALL)
_LINE = re.compile(r"^line (\d+)(?:, column \d+)?: (.+)$", re.DOTALL)
_ON_LINE = re.compile(r"\bon line (\d+)\b")
_PART = re.compile(r"\[(\d+)\]|([^.\[\]]+)")
_MAX_BYTES = 1 << 20  # yamlsafe refuses bigger recipes anyway


def _split_fix(what: str) -> tuple[str, str | None]:
    """("must be text (got 1)", None) / ("unknown key", "did you mean 'learning_rate'?"): a trailing
    parenthesis holds the observed value ("got ...") and/or the fix."""
    if not what.endswith(")"):
        return what, None
    depth, start = 0, -1
    for i in range(len(what) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(what[i], 0)
        if depth == 0:
            start = i
            break
    if start <= 0:
        return what, None
    parts = [p.strip() for p in what[start + 1:-1].split("; ")]
    got = [p for p in parts if p.startswith("got ")]
    fixes = [p for p in parts if not p.startswith("got ")]
    head = what[:start].rstrip()
    message = head + (f" ({'; '.join(got)})" if got else "")
    return message, ("; ".join(fixes) or None)


def _yaml_root(path: Path) -> Any:
    import yaml

    try:
        if path.stat().st_size > _MAX_BYTES:
            return None
        return yaml.compose(path.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except Exception:  # unreadable or invalid YAML: the problem line already says so
        return None


def _line_of(root: Any, field: str) -> int | None:
    """1-based line of `field` ("resources.gpu", "datasets[0].path") in the node tree; for a key that is
    missing, the line of the nearest section that exists (None at the top level)."""
    import yaml

    node, line = root, None
    for index, key in _PART.findall(field.split(", ")[0]):
        if isinstance(node, yaml.SequenceNode) and index:
            i = int(index)
            if i >= len(node.value):
                break
            node = node.value[i]
            line = node.start_mark.line + 1
        elif isinstance(node, yaml.MappingNode) and key:
            hit = next(((k, v) for k, v in node.value if getattr(k, "value", None) == key.strip("'")), None)
            if hit is None:
                break
            line, node = hit[0].start_mark.line + 1, hit[1]
        else:
            break
    return line


def problem_records(problems: list[str], shown: str) -> list[dict[str, Any]]:
    """One {"file", "line", "field", "message", "fix"} per problem line of a RecipeError for `shown`."""
    root: Any = False  # not read yet
    out = []
    for text in problems:
        body = text[len(shown) + 2:] if text.startswith(shown + ": ") else text
        line = field = None
        if m := _LINE.match(body):
            line, body = int(m.group(1)), m.group(2)
        elif (m := _FIELD.match(body)) and " " not in m.group(1).replace(", ", ""):
            field, body = m.group(1), m.group(2)
            if on := _ON_LINE.search(body):
                line = int(on.group(1))
            else:
                if root is False:
                    root = _yaml_root(Path(shown).expanduser())
                line = _line_of(root, field) if root is not None else None
        message, fix = _split_fix(body)
        out.append({"file": shown, "line": line, "field": field, "message": message, "fix": fix})
    return out
