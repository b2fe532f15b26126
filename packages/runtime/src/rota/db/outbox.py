"""The transactional outbox: events are written with the state change, and a relay publishes them.

A crash between commit and publish loses nothing: the row stays unpublished until a relay
(this process after restart) sends it. A crash between publish and marking re-sends the row,
and JetStream drops the copy because `Nats-Msg-Id` is the envelope id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import zlib
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from faststream.nats import NatsBroker
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from rota.bus.broker import publish_headers
from rota.contracts import Envelope
from rota.db.tables import outbox_table, processed_table
from rota.faults import crash_point
from rota.metrics import OUTBOX_LAG
from rota.tracing import outbox_headers

log = logging.getLogger("rota.outbox")

PublishedObserver = Callable[[list[tuple[str, bytes]]], Awaitable[None]]
"""Called with (subject, payload) of each batch once it is published and marked."""


class Outbox:
    def __init__(self, schema: str) -> None:
        metadata = sa.MetaData()
        self.schema = schema
        self.table = outbox_table(metadata, schema)
        self.processed = processed_table(metadata, schema)

    async def add(
        self, conn: AsyncConnection, env: Envelope[Any], subject: str, *, stream: str
    ) -> None:
        """Queue `env` inside the caller's transaction. The trace context goes with it: the
        current one, or the job's when the current span belongs to another job's trace."""
        await self.add_rows(conn, [self.row(env, subject, stream=stream)])

    def row(self, env: Envelope[Any], subject: str, *, stream: str) -> dict[str, Any]:
        """The outbox row for `env`, to queue later with `add_rows`. Built now, so the trace
        context it carries is the one current here (a span the caller is inside)."""
        carrier = outbox_headers(env.job_id, env.type, env.run_id)
        body = env.to_bytes()
        return {"id": env.id, "subject": subject, "stream": stream, "payload": body,
                "headers": publish_headers(env, carrier, body=body)}

    async def add_rows(self, conn: AsyncConnection, rows: list[dict[str, Any]]) -> None:
        """Queue many rows in the caller's transaction; a batch's events cost a round trip
        per thousand instead of one each, and no statement binds more than the driver takes.
        `seq` follows the list's order. An executemany with RETURNING (`rota.db.chunks`)."""
        if rows:
            await conn.execute(sa.insert(self.table).returning(self.table.c.seq), rows)

    async def first_time(self, conn: AsyncConnection, consumer: str, message_id: str) -> bool:
        """The idempotency guard: True once per (consumer, message), inside the caller's tx."""
        return message_id in await self.first_times(conn, consumer, [message_id])

    async def first_times(
        self, conn: AsyncConnection, consumer: str, message_ids: list[str]
    ) -> set[str]:
        """The guard for a whole batch: the ids seen for the first time.
        An id twice in `message_ids` is returned once; the caller applies its first copy.
        An executemany with RETURNING (`rota.db.chunks`)."""
        from sqlalchemy.dialects.postgresql import insert

        rows = [{"consumer": consumer, "message_id": i} for i in dict.fromkeys(message_ids)]
        if not rows:
            return set()
        result = await conn.execute(
            insert(self.processed).on_conflict_do_nothing()
            .returning(self.processed.c.message_id), rows)
        return {str(row.message_id) for row in result}


class OutboxRelay:
    def __init__(
        self,
        outbox: Outbox,
        engine: AsyncEngine,
        broker: NatsBroker,
        *,
        poll_interval_s: float = 0.5,
        batch_size: int = 100,
        serialized: bool = False,
    ) -> None:
        self._outbox = outbox
        self._serialized = serialized
        self._engine = engine
        self._broker = broker
        self._poll_interval_s = poll_interval_s
        self._batch_size = batch_size
        self._wake = asyncio.Event()
        self._ack_timeout_s = 10.0
        self.published = 0
        # Facts a service counts only once they are committed and out (see `rota.metrics`).
        self.observers: list[PublishedObserver] = []

    def wake(self) -> None:
        """Call after committing outbox rows, so they go out now rather than at the next poll."""
        self._wake.set()

    async def drain_once(self) -> int:
        table = self._outbox.table
        async with self._engine.begin() as conn:
            if self._serialized:
                # Several replicas' relays on one table: each would skip the rows another has
                # locked and could publish a job's later event before its earlier one. One
                # drain at a time, in `seq` order, keeps the stream in the outbox's order.
                await conn.execute(sa.select(sa.func.pg_advisory_xact_lock(
                    zlib.crc32(f"outbox-relay:{self._outbox.schema}".encode()))))
            rows = (
                await conn.execute(
                    sa.select(table.c.seq, table.c.id, table.c.subject, table.c.stream,
                              table.c.payload, table.c.headers, table.c.created_at,
                              sa.func.now().label("db_now"))
                    .where(table.c.published_at.is_(None))
                    .order_by(table.c.seq)
                    .limit(self._batch_size)
                    .with_for_update(skip_locked=True)
                )
            ).all()
            # The database's own clock on both sides, so host clock skew cannot show as lag.
            OUTBOX_LAG.set((rows[0].db_now - rows[0].created_at).total_seconds() if rows else 0.0)
            # Pipelined: every publish goes out in order, then all acks are awaited together.
            # A failed ack raises, the transaction rolls back, and the batch is re-sent later
            # under the same Nats-Msg-Ids, which JetStream de-duplicates.
            js = self._broker.connection.jetstream()
            acks = [
                await js.publish_async(row.subject, bytes(row.payload), stream=row.stream,
                                       headers=dict(row.headers))
                for row in rows
            ]
            await asyncio.wait_for(asyncio.gather(*acks), timeout=self._ack_timeout_s)
            if rows:
                crash_point(f"after_publish:{self._outbox.schema}")
                await conn.execute(
                    sa.update(table)
                    .where(table.c.seq.in_([r.seq for r in rows]))
                    .values(published_at=sa.func.now())
                )
        self.published += len(rows)
        if rows and self.observers:
            await self._observe([(r.subject, bytes(r.payload)) for r in rows])
        return len(rows)

    async def _observe(self, published: list[tuple[str, bytes]]) -> None:
        for observer in self.observers:
            try:
                await observer(published)
            except Exception:  # metrics must never hold up or break publishing
                log.exception("outbox relay: an observer failed")

    async def drain(self) -> int:
        """Publish every row committed before the call. A batch shorter than the limit took
        all there were, so no empty read follows it: that read, a transaction of its own,
        came after every batch a busy service wrote."""
        total = 0
        while (sent := await self.drain_once()) > 0:
            total += sent
            if sent < self._batch_size:
                break
        return total

    async def run(self) -> None:
        while True:
            # Cleared before draining: a commit's `wake` during the drain is not lost, and
            # brings the next drain at once.
            self._wake.clear()
            try:
                await self.drain()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS or the database is away; rows wait for the next try
                log.warning("outbox relay: %s; retrying", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._poll_interval_s)

    async def prune(self, older_than: datetime) -> int:
        """Delete outbox rows published, and processed-message records made, before `older_than`.

        Both only guard against repeats: a published row is never sent again, and a record
        only matters while its message can still be redelivered, which JetStream does for
        commands and notices within their streams' max age (7 days) at most.
        """
        outbox, processed = self._outbox.table, self._outbox.processed
        async with self._engine.begin() as conn:
            sent = await conn.execute(sa.delete(outbox).where(outbox.c.published_at < older_than))
            seen = await conn.execute(
                sa.delete(processed).where(processed.c.processed_at < older_than))
        return int(sent.rowcount) + int(seen.rowcount)
