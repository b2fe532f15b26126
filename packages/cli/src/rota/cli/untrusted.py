"""Text that came over the bus, made safe to print on a terminal.

What the CLI prints is largely what teams wrote: job names, cancel reasons, checkpoint URIs,
labels, wait messages, dead letters' causes, services' log lines. Printed as it is, a team
could send the admin's terminal escape sequences (clear the screen, move the cursor, retitle
the window), OSC 8 links that show one text and open another, and bidi overrides that show
text in an order other than its own; and Rich would read `[bold red]x[/]` (or a rule's
`[a-z]`) as its own markup. So every command prints such text through one of these two.
"""

from __future__ import annotations

from rich.markup import escape

_BIDI_CONTROLS = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_DROPPED: dict[int, str | None] = {
    # C0 controls, DEL and C1 controls: ESC (0x1B) starts CSI and OSC sequences, 0x9B and
    # 0x9D are the 8-bit CSI and OSC, BEL (0x07) ends an OSC, CR rewrites the line.
    **{c: None for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))},
    **{c: None for c in _BIDI_CONTROLS},
    0x2028: " ", 0x2029: " ",  # line and paragraph separators
}
_ONE_LINE = str.maketrans({**_DROPPED, 0x09: " ", 0x0A: " "})
_LINES = str.maketrans({**_DROPPED, 0x09: "\t", 0x0A: "\n"})


def plain(value: object, *, multiline: bool = False) -> str:
    """`str(value)` without anything a terminal acts on: controls and bidi overrides are
    dropped; a tab or a newline becomes a space unless `multiline`. For `markup=False`
    printing and `rich.text.Text`."""
    return str(value).translate(_LINES if multiline else _ONE_LINE)


def untrusted(value: object, *, multiline: bool = False) -> str:
    """`plain(value)` with Rich markup escaped: for data put into a markup string or a
    `rich.table.Table` cell, which Rich reads as markup."""
    return escape(plain(value, multiline=multiline))
