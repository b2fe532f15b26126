"""Tables as kubectl and squeue print them: one row per line, in the terminal's width.

A cell that does not fit is cut with "…", never wrapped onto the next line, so every row
stays one line that `grep` and `awk` can read. Ids, times and URLs are never cut; how they
are printed is `rota.formats`.
The long columns (full ids, URIs, paths) appear only with `-o wide`, which cuts nothing;
`--json` has every field.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from rota.cli.untrusted import plain

GAP = "  "
ELLIPSIS = "…"
MIN_CUT_WIDTH = 3  # a column cut narrower than this says nothing


class Output(StrEnum):
    wide = "wide"


OutputOpt = Annotated[Output | None, typer.Option(
    "-o", "--output", help="wide: also the long columns (full ids, URIs, paths), uncut.")]


@dataclass(frozen=True)
class Column:
    header: str
    whole: bool = False  # ids, times, URLs: a cut one is useless, so the others give way
    wide: bool = False   # only with `-o wide`


def terminal_width(console: Console) -> int:
    """`COLUMNS` when set (as squeue reads it), else what the console found."""
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else console.width


def _fit(natural: list[int], whole: list[bool], room: int) -> list[int]:
    """Widths within `room`: whole columns keep theirs; the rest share what is left, the
    narrow ones first keeping their full width (water-filling)."""
    widths = list(natural)
    left = room - sum(w for w, keep in zip(natural, whole, strict=True) if keep)
    flexible = sorted((i for i, keep in enumerate(whole) if not keep), key=natural.__getitem__)
    for n, i in enumerate(flexible):
        share = left // (len(flexible) - n) if left > 0 else 0
        widths[i] = max(min(natural[i], share), min(natural[i], MIN_CUT_WIDTH))
        left -= widths[i]
    return widths


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + ELLIPSIS


def render(columns: Sequence[Column], rows: Sequence[Sequence[str]], *, wide: bool,
           width: int) -> list[str]:
    """The header and one line per row. Without `wide`, the lines fit in `width` unless its
    whole columns alone do not."""
    shown = [i for i, c in enumerate(columns) if wide or not c.wide]
    cells = [[columns[i].header for i in shown]] + [[plain(row[i]) for i in shown] for row in rows]
    natural = [max(len(line[k]) for line in cells) for k in range(len(shown))]
    widths = natural if wide else _fit(natural, [columns[i].whole for i in shown],
                                       width - len(GAP) * (len(shown) - 1))
    return [GAP.join(_cut(cell, w).ljust(w) for cell, w in zip(line, widths, strict=True))
            .rstrip() for line in cells]


def print_table(console: Console, columns: Sequence[Column], rows: Sequence[Sequence[str]],
                *, wide: bool = False) -> None:
    header, *lines = render(columns, rows, wide=wide, width=terminal_width(console))
    # soft_wrap: rich must not wrap a line it thinks too long; we cut them ourselves.
    console.print(Text(header, style="bold"), soft_wrap=True)
    for line in lines:
        console.print(Text(line), soft_wrap=True)
