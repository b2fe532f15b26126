"""Multi-row statements in pieces that no driver refuses.

asyncpg, like the PostgreSQL wire protocol under it, takes at most 32,767 bind parameters in
one statement. A multi-row INSERT binds one per column of every row, and an IN list one per
item, so one cycle's outbox rows (5 columns each) fail past about 6,500 rows: the whole
transaction rolls back, and the next cycle, as large, fails the same way. Every multi-row
write goes through `chunks` instead, in order, inside the caller's transaction: all of it
commits or none.

Rows are sent in executemany form (`conn.execute(insert(t), rows)`), not as
`insert(t).values(rows)`: SQLAlchemy compiles the statement once and caches it, and with a
RETURNING packs the rows into pages of multi-row VALUES itself ("insertmanyvalues"), each
page under the driver's limit (the outbox relies on that alone). Compiling a fresh multi-row
statement for each batch cost about four times the Python CPU per row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa

__all__ = ["MAX_BIND_PARAMETERS", "PARAMETERS_PER_STATEMENT", "chunks", "row_chunks"]

T = TypeVar("T")

MAX_BIND_PARAMETERS = 32_767
"""asyncpg's limit: the protocol counts a statement's parameters in a signed 16-bit field."""

PARAMETERS_PER_STATEMENT = 32_000
"""What a chunk may bind; the rest is room for the statement's own (a WHERE, a SET)."""


def chunks(
    items: Sequence[T], params_each: int, *, budget: int = PARAMETERS_PER_STATEMENT
) -> Iterator[Sequence[T]]:
    """`items` in consecutive slices, each binding at most `budget` parameters when every
    item binds `params_each`. Nothing for no items, so a caller's loop sends no statement."""
    size = max(1, budget // max(1, params_each))
    for start in range(0, len(items), size):
        yield items[start : start + size]


def row_chunks(
    table: sa.Table, rows: Sequence[dict[str, Any]], *, budget: int = PARAMETERS_PER_STATEMENT
) -> Iterator[Sequence[dict[str, Any]]]:
    """`rows` of a multi-row INSERT into `table`, in slices: a row binds at most one parameter
    per column of the table (a server default binds none), whatever keys it has."""
    return chunks(rows, len(table.columns), budget=budget)
