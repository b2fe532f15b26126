"""Published outbox rows and processed-message records are pruned past their retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from rota.bus.broker import make_broker
from rota.db.engine import make_engine
from rota.db.outbox import Outbox, OutboxRelay
from rota.endpoints import Endpoints
from rota.settings import Settings

SCHEMA = "prune_test"


async def test_prune_keeps_unpublished_rows_and_recent_records(endpoints: Endpoints) -> None:
    engine = make_engine(endpoints.database_url)
    outbox = Outbox(schema=SCHEMA)
    now = datetime.now(UTC)
    old, recent = now - timedelta(days=8), now - timedelta(hours=1)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE'))
            await conn.execute(sa.text(f'CREATE SCHEMA "{SCHEMA}"'))
            await conn.run_sync(outbox.table.metadata.create_all)
            rows = [("sent-long-ago", old, old), ("sent-lately", old, recent), ("never-sent", old, None)]
            await conn.execute(sa.insert(outbox.table), [
                {"id": id_, "subject": "rota.evt.x", "stream": "ROTA_EVT", "payload": b"{}",
                 "headers": {}, "created_at": created, "published_at": published}
                for id_, created, published in rows
            ])
            await conn.execute(sa.insert(outbox.processed), [
                {"consumer": "c", "message_id": "seen-long-ago", "processed_at": old},
                {"consumer": "c", "message_id": "seen-lately", "processed_at": recent},
            ])
        broker = make_broker(Settings(), endpoints.nats_url, name="prune-test")  # never connected
        relay = OutboxRelay(outbox, engine, broker)

        assert await relay.prune(now - timedelta(days=7)) == 2

        async with engine.connect() as conn:
            kept = set((await conn.execute(sa.select(outbox.table.c.id))).scalars())
            seen = set((await conn.execute(sa.select(outbox.processed.c.message_id))).scalars())
        assert kept == {"sent-lately", "never-sent"}
        assert seen == {"seen-lately"}
        assert await relay.prune(now - timedelta(days=7)) == 0
    finally:
        async with engine.begin() as conn:
            await conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{SCHEMA}" CASCADE'))
        await engine.dispose()
