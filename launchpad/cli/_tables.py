"""Tables that keep one line per row at any terminal width (80 columns included).

Rich wraps a cell that does not fit, so a long instance type like ``1x-A100_SXM4-32-65536`` turned every row
into 3-5 lines. Here each column says how much it matters (`priority`) and whether it may be shortened:
columns are dropped, least useful first, until the rest fit; shortenable cells end in "…"; `whole` cells
(a job id a user copies into the next command, a state) are never cut. Wider terminals keep more columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_SHORTEST = 6  # a shortened cell keeps at least this many characters ("g2-st…")
OPTIONAL = 5  # columns below this priority appear only on terminals wide enough for every cell
_GAP = 3  # between two columns: padding, the (blank) divider, padding (box.SIMPLE_HEAD, no outer edge)


@dataclass(frozen=True)
class Col:
    header: str
    justify: str = "left"
    priority: int = 5  # higher = kept longer when the terminal is narrow
    whole: bool = False  # never shortened (ids, states, numbers)


def _plain(cell: Any) -> str:
    from rich.text import Text

    return cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain


def _least(c: Col, natural: int) -> int:
    return natural if c.whole else min(natural, max(_SHORTEST, len(c.header)))


def column_widths(cols: Sequence[Col], natural: Sequence[int], width: int) -> dict[int, int]:
    """{column index: width} of the columns kept: the least useful are dropped until the others fit at
    their least width, then the widest shortenable columns give way one character at a time."""
    keep = list(range(len(cols)))

    def least_total(idx: list[int]) -> int:
        return sum(_least(cols[i], natural[i]) for i in idx) + _GAP * (len(idx) - 1)

    def natural_total(idx: list[int]) -> int:
        return sum(natural[i] for i in idx) + _GAP * (len(idx) - 1)

    def least_useful(idx: list[int]) -> int:
        return min(idx, key=lambda i: (cols[i].priority, -i))  # equal priority: the rightmost goes

    # Optional columns (priority < OPTIONAL) are shown only when everything fits unshortened; the others
    # are dropped only when even shortened they would not fit.
    while len(keep) > 1 and natural_total(keep) > width and cols[least_useful(keep)].priority < OPTIONAL:
        keep.remove(least_useful(keep))
    while len(keep) > 1 and least_total(keep) > width:
        keep.remove(least_useful(keep))
    widths = {i: natural[i] for i in keep}
    excess = natural_total(keep) - width
    for i in sorted(keep, key=lambda i: (cols[i].priority, -i)):  # the least useful give way first
        if excess <= 0:
            break
        cut = min(excess, widths[i] - _least(cols[i], natural[i]))
        widths[i] -= cut
        excess -= cut
    return widths


def fit_table(title: str | None, cols: Sequence[Col], rows: Sequence[Sequence[Any]], width: int):
    """A rich Table of `rows` (cells: str with markup, or Text) that renders one line per row in `width`."""
    from rich import box
    from rich.table import Table

    natural = [max([len(cols[i].header)] + [len(_plain(r[i])) for r in rows]) for i in range(len(cols))]
    widths = column_widths(cols, natural, width)
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for i, w in widths.items():
        c = cols[i]
        # Explicit widths: rich never wraps or re-balances; a shortened cell ends in "…", a whole one fits.
        t.add_column(c.header if len(c.header) <= w else c.header[: w - 1] + "…", justify=c.justify,  # type: ignore[arg-type]
                     width=w, no_wrap=True, overflow="ellipsis")
    for r in rows:
        t.add_row(*(r[i] for i in widths))
    return t
