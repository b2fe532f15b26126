"""Replicas' outbox relays on one table take turns (`OutboxRelay(serialized=True)`): two
draining at once still put the rows on the stream in `seq` order, as one relay would."""

from __future__ import annotations

import asyncio
import uuid

from faststream.nats import NatsBroker
from nats.aio.client import Client
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.subjects import STREAM_EVT
from rota.db.outbox import Outbox, OutboxRelay
from rota.endpoints import Endpoints
from rota.ids import new_id
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.harness import events_with_headers, stream_last_seq
from tests.integration.ledger.conftest import truncate

ROWS = 400


async def test_two_serialized_relays_publish_in_seq_order(
    ledger_endpoints: Endpoints, ledger_nc: Client, ledger_engine: AsyncEngine,
) -> None:
    await truncate(ledger_engine)
    subject = f"rota.evt.test.turns{uuid.uuid4().hex[:8]}"
    outbox = Outbox(schema="ledger")
    job_id, run_id = new_id(), new_id()
    rows = [outbox.row(envelope(m.RunFinished(run_id=run_id, job_id=job_id, exit_code=i),
                                source="executor", job_id=job_id, run_id=run_id),
                       subject, stream=STREAM_EVT) for i in range(ROWS)]
    async with ledger_engine.begin() as conn:
        await outbox.add_rows(conn, rows)
    since = await stream_last_seq(ledger_nc)
    brokers = [NatsBroker(ledger_endpoints.nats_url) for _ in range(2)]
    try:
        for broker in brokers:
            await broker.connect()
        relays = [OutboxRelay(outbox, ledger_engine, broker, batch_size=7, serialized=True)
                  for broker in brokers]
        sent = await asyncio.gather(*(relay.drain() for relay in relays))
    finally:
        for broker in brokers:
            await broker.stop()
        await truncate(ledger_engine)
    assert sum(sent) == ROWS and all(sent), sent  # both relays did part of the work
    published = [doc for doc, _ in await events_with_headers(ledger_nc, subject, since_seq=since)]
    assert [doc["data"]["exit_code"] for doc in published] == list(range(ROWS))
