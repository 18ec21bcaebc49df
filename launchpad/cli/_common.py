"""Shared bits of the CLI. Everything heavy (rich, pydantic, providers) is imported on first use so
`launchpad --help` stays fast."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import click


@lru_cache(maxsize=1)
def console():
    from rich.console import Console

    return Console(highlight=False)


@lru_cache(maxsize=1)
def err_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def esc(text: object) -> str:
    """User text (paths, job names, error messages, hints) for a rich format string. Rich reads
    `[...]` as markup: `[/v1]` in a path is a MarkupError and `pip install 'launchpad[s3]'` would lose
    its `[s3]`. Markup we write ourselves stays outside: f"[red]error:[/] {esc(e)}"."""
    from rich.markup import escape

    return escape(str(text))


def json_option(fn: Callable) -> Callable:
    """Adds `--json`: machine-readable output on stdout instead of tables."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts instead of tables.")(fn)


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=_json_default) + "\n")
    sys.stdout.flush()


def _json_default(o: Any) -> Any:
    if hasattr(o, "value"):  # enums
        return o.value
    if hasattr(o, "to_dict"):
        return o.to_dict()
    return str(o)


def print_recipe_notes(recipe: Any) -> None:
    """What loading the recipe translated or ignored (launchpad.axolotl), on stderr: stdout stays the result."""
    for line in getattr(recipe, "notes", ()):
        warning = ": warning: " in line
        err_console().print(f"[yellow]![/] {esc(line.replace(': warning: ', ': ', 1))}" if warning else
                            f"[dim]i {esc(line)}[/]", soft_wrap=True)
