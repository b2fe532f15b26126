"""What every Rota service shares: broker, streams, migrations, engine, outbox relay, ping.

A service module builds one `RotaService`, registers its handlers on `service.broker`, and
runs `service.run()`. Startup order: tracing → /metrics → migrations → engine → NATS + streams →
subscribers → relay. Shutdown reverses it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faststream import FastStream
from faststream.nats import NatsBroker
from faststream.nats.annotations import NatsMessage
from nats.aio.msg import Msg
from sqlalchemy.ext.asyncio import AsyncEngine

from rota.auth.keys import with_identity
from rota.auth.senders import Roster, SenderCheck, Signer, install_signer
from rota.bus.batch import (
    BatchHandler,
    MessageHandler,
    PullConsumer,
    Retry,
    batch_consumer,
    message_consumer,
)
from rota.bus.broker import StreamLimits, make_broker, require_streams
from rota.bus.deadletter import DeadLetters
from rota.bus.partition import Partition, PartitionKey
from rota.bus.query import answer_query
from rota.clock import Clock, SystemClock
from rota.contracts import messages as m
from rota.contracts.subjects import deadletter, ping, replica_ping
from rota.db import migrate
from rota.db.engine import make_engine
from rota.db.outbox import Outbox, OutboxRelay
from rota.endpoints import Endpoints, NotRunningError, resolve
from rota.metrics import register as register_metrics
from rota.metrics import serve as serve_metrics
from rota.retention import prune_periodically
from rota.settings import Settings, get_settings
from rota.telemetry import flush_tracing, setup_tracing

log = logging.getLogger("rota.service")


class RotaService:
    def __init__(
        self,
        name: str,
        *,
        migrations: Path | None,
        settings: Settings | None = None,
        clock: Clock | None = None,
        endpoints: Endpoints | None = None,
    ) -> None:
        self.name = name
        self.settings = with_identity(settings or get_settings(), name)
        self.clock: Clock = clock or SystemClock()
        self._migrations = migrations
        self._endpoints: Endpoints | None = endpoints
        self._unresolved: NotRunningError | None = None
        if endpoints is None:
            try:
                self._endpoints = resolve(self.settings)
            except NotRunningError as exc:
                # Still buildable (for AsyncAPI generation); starting it reports `exc`.
                self._unresolved = exc
        self.broker: NatsBroker = make_broker(
            self.settings,
            self._endpoints.nats_url if self._endpoints else "nats://127.0.0.1:4222",
            name=name,
        )
        self.partition = Partition.from_settings(self.settings)
        """Which replica of its service this process is (`rota.bus.partition`)."""
        self.outbox = Outbox(schema=name)
        register_metrics(name)
        self.metrics_port: int | None = None
        self.senders: SenderCheck | None = None
        self._engine: AsyncEngine | None = None
        self.relay: OutboxRelay | None = None
        self._relay_task: asyncio.Task[None] | None = None
        self._prune_task: asyncio.Task[None] | None = None
        self._consumers: list[PullConsumer] = []
        self._consumer_tasks: list[asyncio.Task[None]] = []
        self.app = FastStream(
            self.broker,
            on_startup=[self._on_startup],
            after_startup=[self._after_startup],
            on_shutdown=[self._on_shutdown],
            after_shutdown=[self._after_shutdown],
        )
        self.broker.subscriber(ping(name), include_in_schema=False)(self._pong)
        if not self.partition.single:  # `rota up` waits for each replica by its own subject
            self.broker.subscriber(replica_ping(name, self.partition.index),
                                   include_in_schema=False)(self._pong)
        self.dead_letters = DeadLetters(schema=name)
        # A queue group: a leader and its standby share one table, so one of them answers.
        self.broker.subscriber(deadletter(name), queue=f"{name}-deadletter",
                               include_in_schema=False)(self._list_dead_letters)

    @property
    def engine(self) -> AsyncEngine:
        if self._engine is None:
            raise RuntimeError(f"{self.name}: the database engine is not started")
        return self._engine

    async def _pong(self, msg: NatsMessage) -> bytes:
        # The pid tells apart instances that share the subject (a scheduler and its standby).
        return b'{"ok": true, "service": "%s", "pid": %d}' % (self.name.encode(), os.getpid())

    async def _list_dead_letters(self, msg: NatsMessage) -> bytes:
        async def run(query: m.ListDeadLetters) -> m.ApiReply:
            return m.ApiReply(ok=True, result=await self.dead_letters.list(self.engine, query))

        return await answer_query(msg.body, m.ListDeadLetters, run, source=self.name,
                                  max_bytes=self.settings.max_message_bytes)

    async def _dead_letter(self, msg: Msg, consumer: str, exc: BaseException) -> None:
        await self.dead_letters.record(self.engine, msg, consumer, exc)

    def _partitioned(self, durable: str, key: PartitionKey | None, whole: bool
                     ) -> tuple[str, Callable[[Msg], bool] | None, str | None]:
        """The durable, filter and family of a consumer split among this service's replicas
        by `key` (or, `whole`, one that sees every message and filters them itself); with one
        replica, the plain durable."""
        if self.partition.single or (key is None and not whole):
            return durable, None, None
        partition = self.partition
        keep = None if key is None else (lambda msg: partition.owns(key(msg)))
        return partition.durable(durable), keep, durable

    def js_subscriber(
        self, subject: str, *, stream: str, durable: str, batch_size: int = 32,
        partition_key: PartitionKey | None = None,
    ) -> Callable[[MessageHandler], MessageHandler]:
        """A durable pull consumer with manual acks: ack on success, delayed nak on failure.

        Handlers ack bad input themselves after rejecting it. The database or NATS away is
        retried in place; any other failure is retried up to `ROTA_MAX_DELIVER` deliveries,
        then kept in the dead letter (see `rota.bus.batch.Retry`). A handler may ack or nack
        its message itself; nothing is sent for it after that.

        `partition_key`: with several replicas, each has its own durable and handles the
        messages whose key hashes to it, in order (`rota.bus.partition`). Without it, the
        replicas share one durable: JetStream hands each message to one of them.
        """
        name, keep, family = self._partitioned(durable, partition_key, False)

        def register(handler: MessageHandler) -> MessageHandler:
            self._consumers.append(message_consumer(
                subject, stream, name, batch_size, handler, max_ack_pending=1000, keep=keep,
                family=family))
            return handler

        return register

    def js_batch_subscriber(
        self, subject: str, *, stream: str, durable: str, batch_size: int = 256,
        partition_key: PartitionKey | None = None, partitioned: bool = False,
        filter_subjects: tuple[str, ...] = (), gather_s: float = 0.0,
        keep: Callable[[Msg], bool] | None = None, starts_after: str | None = None,
    ) -> Callable[[BatchHandler], BatchHandler]:
        """Like `js_subscriber`, for handlers that fold a whole pull batch in one transaction.

        A batch is acked or retried as a whole, so such a handler must be idempotent per
        message (a retried batch replays messages it had already applied). `partitioned`
        (with no key): a durable per replica that gets every message, for a handler that
        keeps only what `service.partition` owns itself. `filter_subjects`: the only subjects
        under `subject` the handler is given (`PullConsumer.filter_subjects`); `gather_s`: how
        long a trickle of messages may gather into a batch (`PullConsumer.gather_s`).
        `keep`: the messages the handler is given; the others are acked unread (not with a
        partitioned consumer, which keeps its replica's). `starts_after`: a durable (and its
        partitioned copies) that handled these messages so far: this one, when new, starts
        after the lowest of their ack floors rather than at the stream's start.
        """
        name, owned, family = self._partitioned(durable, partition_key, partitioned)
        if keep is not None and owned is not None:
            raise ValueError(f"{durable}: a partitioned consumer keeps its replica's messages")
        keep = keep or owned
        family = starts_after or family

        def register(handler: BatchHandler) -> BatchHandler:
            self._consumers.append(batch_consumer(subject, stream, name, batch_size, handler,
                                                  keep=keep, family=family,
                                                  filter_subjects=filter_subjects,
                                                  gather_s=gather_s))
            return handler

        return register

    def _trust(self) -> None:
        """Sign what this service publishes with its NATS identity's key, and believe only
        events whose owner signed them, when the identity and the roster are configured."""
        if self.settings.nats_creds is not None:
            install_signer(Signer.from_creds(self.settings.nats_creds))
        if self.settings.nats_roster is not None:
            self.senders = SenderCheck(Roster.load(self.settings.nats_roster))
        else:
            log.warning("%s: no ROTA_NATS_ROSTER: events are believed without a sender check",
                        self.name)

    async def _on_startup(self) -> None:
        setup_tracing(self.name)
        self._trust()
        # Before the slow steps, so a scrape during migrations finds the process up.
        self.metrics_port = serve_metrics(self.name, self.settings)
        if self._endpoints is None:
            assert self._unresolved is not None
            raise self._unresolved
        endpoints = self._endpoints
        if self._migrations is not None:
            await asyncio.to_thread(
                migrate.upgrade, endpoints.database_url, self.name, self._migrations
            )
        self._engine = make_engine(endpoints.database_url)
        await self.broker.connect()
        await require_streams(
            self.broker.connection.jetstream(), self.settings.stream_replicas,
            StreamLimits.from_settings(self.settings),
            allow_single=self.settings.allow_single_replica_on_cluster)
        self.relay = OutboxRelay(
            self.outbox,
            self._engine,
            self.broker,
            poll_interval_s=self.settings.outbox_poll_interval_s,
            batch_size=self.settings.outbox_batch_size,
            # Replicas share the outbox table: one drain at a time keeps the stream in its order.
            serialized=not self.partition.single,
        )

    async def _after_startup(self) -> None:
        assert self.relay is not None
        self._relay_task = asyncio.create_task(self.relay.run(), name=f"{self.name}-outbox")
        self._prune_task = asyncio.create_task(prune_periodically(
            "published outbox rows and processed-message records", self.relay.prune, self.clock,
            self.settings.inbox_retention_s, self.settings.decision_prune_interval_s,
        ), name=f"{self.name}-prune")
        self._consumer_tasks = [self.start_consumer(consumer) for consumer in self._consumers]
        log.info("%s: ready%s", self.name,
                 "" if self.partition.single else f" (replica {self.partition.label})")

    def start_consumer(self, consumer: PullConsumer) -> asyncio.Task[None]:
        """Run `consumer` with the service's retry rules and sender check, until its task is
        cancelled; for consumers started and stopped while the service runs (the ledger's
        per-flavor ones follow their leases)."""
        retry = Retry(self.settings.retry_delay_s, self.settings.max_deliver, self._dead_letter)
        return asyncio.create_task(consumer.run(
            self.broker.connection.jetstream(), ack_wait_s=self.settings.ack_wait_s,
            retry=retry, senders=self.senders), name=consumer.durable)

    async def _on_shutdown(self) -> None:
        tasks = [*self._consumer_tasks, self._relay_task, self._prune_task]
        await stop_tasks([t for t in tasks if t is not None])

    async def _after_shutdown(self) -> None:
        # After every handler's own shutdown hook, which may still need the database.
        if self._engine is not None:
            await self._engine.dispose()
        await asyncio.to_thread(flush_tracing)

    async def run(self) -> None:
        logging.basicConfig(
            level=self.settings.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
        )
        await self.app.run(log_level=logging.getLevelName(self.settings.log_level))


async def stop_tasks(tasks: list[asyncio.Task[None]], *, patience_s: float = 0.5) -> None:
    """Cancel `tasks` and wait for them, cancelling again whatever is still running.

    A single cancel is not always enough: on Python 3.11 `asyncio.wait_for` (inside nats-py's
    `fetch`) can swallow a cancellation that arrives as its inner wait completes, and the
    consumer loop then fetches again; a stop that awaited such a task would hang until killed.
    """
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=patience_s)
    for task in tasks:
        if not task.cancelled() and (error := task.exception()) is not None:
            log.warning("%s had failed: %s: %s", task.get_name(), type(error).__name__, error)


def run_forever(service: RotaService) -> None:
    asyncio.run(service.run())


def empty_service(name: str, package_dir: Path, **kwargs: Any) -> RotaService:
    """A service with no handlers yet: it migrates, connects, and answers pings."""
    return RotaService(name, migrations=package_dir / "migrations", **kwargs)
