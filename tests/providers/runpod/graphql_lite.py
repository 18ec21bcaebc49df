"""Just enough GraphQL for the RunPod double: parse one query or mutation document (fields, aliases, arguments
with literal or $variable values, selection sets) and project a result onto a selection set, as a GraphQL
server answers: only the fields asked for, nested lists and objects followed, callables resolved with the
field's arguments. No fragments, directives or type checking (neither the SDK nor launchpad sends them)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(r'\s+|,|#[^\n]*|(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)'
                    r'|(?P<name>[_A-Za-z][_0-9A-Za-z]*)|(?P<punct>[{}()\[\]:!$=@])')


class GraphQLSyntaxError(ValueError):
    pass


@dataclass
class Field:
    name: str
    alias: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    selection: list[Field] | None = None

    @property
    def key(self) -> str:
        return self.alias or self.name


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise GraphQLSyntaxError(f"Syntax Error: unexpected character {text[pos]!r} at {pos}")
        pos = m.end()
        kind = m.lastgroup
        if kind:
            out.append((kind, m.group(kind)))
    return out


class _Parser:
    def __init__(self, text: str, variables: dict[str, Any]):
        self.toks, self.i, self.vars = _tokens(text), 0, variables

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise GraphQLSyntaxError(f"Syntax Error: expected {value or 'a token'}, found {tok[1] if tok else 'EOF'}")
        self.i += 1
        return tok

    def document(self) -> tuple[str, list[Field]]:
        kind = "query"
        tok = self.peek()
        if tok and tok[0] == "name" and tok[1] in ("query", "mutation"):
            kind = self.take()[1]
            if self.peek() and self.peek()[0] == "name":  # type: ignore[index]
                self.take()
            if self.peek() and self.peek()[1] == "(":  # type: ignore[index]
                while self.take()[1] != ")":  # variable definitions: their types are not checked
                    pass
        fields = self.selection()
        if self.peek() is not None:
            raise GraphQLSyntaxError(f"Syntax Error: unexpected {self.peek()[1]!r} after the operation")  # type: ignore[index]
        return kind, fields

    def selection(self) -> list[Field]:
        self.take("{")
        fields = []
        while self.peek() and self.peek()[1] != "}":  # type: ignore[index]
            fields.append(self.field())
        self.take("}")
        return fields

    def field(self) -> Field:
        kind, name = self.take()
        if kind != "name":
            raise GraphQLSyntaxError(f"Syntax Error: expected a field name, found {name!r}")
        f = Field(name)
        if self.peek() and self.peek()[1] == ":":  # type: ignore[index]
            self.take(":")
            f.alias, f.name = name, self.take()[1]
        if self.peek() and self.peek()[1] == "(":  # type: ignore[index]
            self.take("(")
            while self.peek() and self.peek()[1] != ")":  # type: ignore[index]
                key = self.take()[1]
                self.take(":")
                f.args[key] = self.value()
            self.take(")")
        if self.peek() and self.peek()[1] == "{":  # type: ignore[index]
            f.selection = self.selection()
        return f

    def value(self) -> Any:
        kind, text = self.take()
        if kind == "str":
            return json.loads(text)
        if kind == "num":
            return float(text) if any(c in text for c in ".eE") else int(text)
        if text == "$":
            return self.vars.get(self.take()[1])
        if text == "[":
            items = []
            while self.peek() and self.peek()[1] != "]":  # type: ignore[index]
                items.append(self.value())
            self.take("]")
            return items
        if text == "{":
            obj = {}
            while self.peek() and self.peek()[1] != "}":  # type: ignore[index]
                key = self.take()[1]
                self.take(":")
                obj[key] = self.value()
            self.take("}")
            return obj
        if kind == "name":
            return {"true": True, "false": False, "null": None}.get(text, text)  # an enum value as its name
        raise GraphQLSyntaxError(f"Syntax Error: unexpected {text!r}")


def parse(text: str, variables: dict[str, Any] | None = None) -> tuple[str, list[Field]]:
    """("query" | "mutation", top-level fields)."""
    return _Parser(text, variables or {}).document()


def project(value: Any, selection: list[Field] | None) -> Any:
    """`value` as a server returns it for `selection`: only the fields selected."""
    if selection is None or value is None:
        return value
    if isinstance(value, list):
        return [project(v, selection) for v in value]
    out = {}
    for f in selection:
        v = value.get(f.name) if isinstance(value, dict) else None
        if callable(v):
            v = v(f.args)
        out[f.key] = project(v, f.selection)
    return out
