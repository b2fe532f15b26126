"""Every chunk of a multi-row write binds fewer parameters than asyncpg takes."""

from __future__ import annotations

import sqlalchemy as sa
from rota.db.chunks import MAX_BIND_PARAMETERS, chunks, row_chunks
from rota.db.tables import outbox_table
from sqlalchemy.dialects.postgresql import asyncpg


def test_chunks_cover_the_items_in_order_and_send_nothing_for_none() -> None:
    items = list(range(10))
    assert [list(c) for c in chunks(items, 3, budget=10)] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert list(chunks([], 5)) == []
    assert [list(c) for c in chunks(items, 50, budget=10)] == [[i] for i in items]


def test_no_outbox_chunk_compiles_to_more_parameters_than_the_driver_takes() -> None:
    table = outbox_table(sa.MetaData(), "any")
    rows = [{"id": f"e{i}", "subject": "s", "stream": "S", "payload": b"", "headers": {}}
            for i in range(20_000)]  # fmt: skip
    sizes = []
    for chunk in row_chunks(table, rows):
        compiled = sa.insert(table).values(list(chunk)).compile(dialect=asyncpg.dialect())
        assert len(compiled.params) <= MAX_BIND_PARAMETERS
        sizes.append(len(chunk))
    assert sum(sizes) == len(rows) and len(sizes) > 1
