"""Multi-row writes larger than one statement may bind go through whole, in order.

asyncpg refuses a statement with more than 32,767 bind parameters; an outbox row binds 5, so
a cycle that explains 7,000 jobs at once (a restart does) used to fail and roll back.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.db.engine import make_engine
from rota.db.outbox import Outbox
from rota.endpoints import Endpoints
from rota_scheduler import store as scheduler_store
from rota_scheduler.actions import DecisionRecord, NewRun
from sqlalchemy.ext.asyncio import AsyncEngine

SCHEMA = "multirow_test"
MANY = 7_500
"""Past 32,767 / 5 outbox columns, and past it for every table below."""


@pytest.fixture
async def engine(endpoints: Endpoints) -> AsyncIterator[AsyncEngine]:
    engine = make_engine(endpoints.database_url)
    async with engine.begin() as conn:
        await conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE'))
        await conn.execute(sa.text(f'CREATE SCHEMA "{SCHEMA}"'))
    yield engine
    async with engine.begin() as conn:
        await conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE'))
    await engine.dispose()


async def test_one_call_queues_more_outbox_rows_than_one_statement_may_bind(
    engine: AsyncEngine,
) -> None:
    outbox = Outbox(schema=SCHEMA)
    async with engine.begin() as conn:
        await conn.run_sync(outbox.table.metadata.create_all)
    message = m.ListAllocations(active_only=True)
    rows = [outbox.row(envelope(message, source="test"), "rota.test", stream="ROTA_EVT")
            for _ in range(MANY)]  # fmt: skip
    async with engine.begin() as conn:
        await outbox.add_rows(conn, rows)
    async with engine.connect() as conn:
        ids = (await conn.execute(sa.select(outbox.table.c.id).order_by(outbox.table.c.seq))).scalars()
        assert list(ids) == [r["id"] for r in rows]  # all of them, in the list's order


async def test_the_idempotency_guard_takes_more_ids_than_one_statement_may_bind(
    engine: AsyncEngine,
) -> None:
    outbox = Outbox(schema=SCHEMA)
    async with engine.begin() as conn:
        await conn.run_sync(outbox.processed.metadata.create_all)
    ids = [f"msg-{i:05d}" for i in range(20_000)]  # 2 parameters each
    async with engine.begin() as conn:
        assert await outbox.first_times(conn, "c", ids) == set(ids)
    async with engine.begin() as conn:
        assert await outbox.first_times(conn, "c", [*ids[:10], "new"]) == {"new"}


async def test_the_scheduler_writes_a_cycle_of_any_size(engine: AsyncEngine) -> None:
    metadata = sa.MetaData()
    scheduler_store.runs.to_metadata(metadata, schema=SCHEMA)
    decisions = scheduler_store.decisions.to_metadata(metadata, schema=SCHEMA)
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
    now = datetime.now(UTC)
    new_runs = [NewRun(f"run-{i:05d}", f"job-{i:05d}", f"prop-{i:05d}") for i in range(MANY)]
    records = [DecisionRecord(f"job-{i:05d}", "pending", "PRIORITY", {}, {}) for i in range(MANY)]
    many_runs = [f"run-{i:05d}" for i in range(40_000)]  # more ids than one IN list may bind
    async with engine.begin() as conn:
        conn = await conn.execution_options(schema_translate_map={"scheduler": SCHEMA})
        await scheduler_store.add_runs(conn, new_runs, now)
        await scheduler_store.add_decisions(conn, "cycle", now, records)
        claimed = await scheduler_store.claim_starts(conn, many_runs, now)
    assert len(claimed) == MANY
    async with engine.connect() as conn:
        assert (await conn.execute(sa.select(sa.func.count()).select_from(decisions))).scalar() == MANY
