"""Durable pull consumers: a whole batch to one handler (one transaction), or each message
to its handler in turn.

Not FastStream's batch mode: that keeps fetching until a batch is full or its timeout ends,
so a half-full batch waits the whole timeout, and a short timeout orphans messages that
arrive as a fetch expires (they come back only after the ack wait). nats-py's own `fetch`
returns as soon as messages are there, which is the latency we want.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from asyncpg.exceptions import (
    AdminShutdownError,
    CannotConnectNowError,
    ConnectionDoesNotExistError,
    PostgresConnectionError,
)
from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError, NoServersError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig
from nats.js.errors import ServiceUnavailableError
from opentelemetry.trace import Span, SpanKind

from rota.auth.senders import SenderCheck
from rota.bus.partition import start_of_new_durable, starting_at
from rota.bus.trace_fill import job_id_of
from rota.faults import crash_point, fail_point
from rota.metrics import FORGED_MESSAGES
from rota.tracing import context_from_headers, job_root_context, tracer

log = logging.getLogger("rota.bus.batch")

BatchHandler = Callable[[list[Msg]], Awaitable[None]]
MessageHandler = Callable[[Msg], Awaitable[None]]

FETCH_WAIT_S = 5.0
"""How long an idle fetch waits; it returns at once when messages arrive."""


DeadLetter = Callable[[Msg, str, BaseException], Awaitable[None]]
"""Records a message that failed on its last delivery: (message, consumer durable, error)."""


@dataclass(frozen=True)
class Retry:
    """What a consumer does when handling a message fails.

    A failure the message may not cause (the database or NATS away: `is_transient`) is
    retried in place, the delivery kept alive, so an outage never uses up deliveries. Any
    other failure is nacked for a retry after `delay_s`, until the delivery that reaches
    `max_deliver`: then the message goes to the dead letter and is terminated, so a message
    that can never be handled stops coming back.
    """

    delay_s: float
    max_deliver: int = 1_000_000
    dead_letter: DeadLetter | None = None

    async def failed(self, msg: Msg, durable: str, exc: BaseException) -> None:
        delivered = _deliveries(msg)
        if self.dead_letter is None or delivered < self.max_deliver:
            log.error("%s: handling %s failed (delivery %d of %d); will retry", durable,
                      msg.subject, delivered, self.max_deliver, exc_info=exc)
            await msg.nak(delay=self.delay_s)
            return
        try:
            await self.dead_letter(msg, durable, exc)
        except Exception:
            # JetStream delivers it no more (max_deliver); it stays in the stream, and the
            # server's MAX_DELIVERIES advisory names it.
            log.exception("%s: %s failed %d times and its dead letter could not be written",
                          durable, msg.subject, delivered)
            await msg.nak(delay=self.delay_s)
            return
        log.error("%s: %s failed %d times; moved to the dead letter", durable, msg.subject,
                  delivered, exc_info=exc)
        await msg.term()


def _deliveries(msg: Msg) -> int:
    try:
        return int(msg.metadata.num_delivered or 1)
    except (ValueError, AttributeError, TypeError):  # not a JetStream message (tests)
        return 1


_TRANSIENT = (ConnectionError, TimeoutError, ConnectionClosedError, ServiceUnavailableError,
              NoServersError, PostgresConnectionError, ConnectionDoesNotExistError,
              CannotConnectNowError, AdminShutdownError)
# Not every OSError: a missing executable or file is the message's doing, not an outage.
_CONNECTION_ERRNOS = frozenset({errno.ECONNREFUSED, errno.ECONNRESET, errno.EHOSTUNREACH,
                                errno.ENETUNREACH, errno.ETIMEDOUT, errno.EPIPE})


def is_transient(exc: BaseException) -> bool:
    """Whether `exc` says the database or NATS is unreachable, not that the message is bad."""
    seen: BaseException | None = exc
    for _ in range(8):  # the cause chain: SQLAlchemy wraps the driver's error
        if seen is None:
            return False
        if isinstance(seen, _TRANSIENT) or getattr(seen, "connection_invalidated", False):
            return True
        # asyncpg reports a refused connection to several addresses as a bare OSError.
        if type(seen) is OSError and (seen.errno in _CONNECTION_ERRNOS
                                      or "Connect call failed" in str(seen)):
            return True
        seen = seen.__cause__
    return False


TRANSIENT_PATIENCE_S = 1.0
"""The least wait before a transient failure is retried in place, so an outage is not
hammered; a `Retry.delay_s` of 0 (tests) retries at once."""


async def _retry_in_place(msgs: list[Msg], durable: str, exc: BaseException,
                          retry: Retry) -> None:
    log.warning("%s: the database or NATS is unreachable (%s: %s); retrying in place",
                durable, type(exc).__name__, next(iter(str(exc).splitlines()), ""))
    await asyncio.sleep(max(retry.delay_s, TRANSIENT_PATIENCE_S) if retry.delay_s else 0)
    for msg in msgs:
        with contextlib.suppress(Exception):
            await msg.in_progress()


def forged(msg: Msg, senders: SenderCheck, consumer: str) -> bool:
    """Whether `msg`'s sender may not send it; such a message is counted and logged here."""
    refusal = senders.refusal(msg.subject, msg.headers, msg.data,
                              stored_at=msg.metadata.timestamp.timestamp())
    if refusal is None:
        return False
    FORGED_MESSAGES.labels(msg.subject).inc()
    log.warning("%s: refused a message: %s", consumer, refusal)
    return True


async def believed(batch: list[Msg], senders: SenderCheck, durable: str) -> list[Msg]:
    """The messages whose sender may send them; the others are terminated, never handled
    and never redelivered."""
    kept = []
    for msg in batch:
        if not forged(msg, senders, durable):
            kept.append(msg)
            continue
        with contextlib.suppress(Exception):
            await msg.term()
    return kept


def server_filters_many(js: JetStreamContext) -> bool:
    """Whether the server takes a consumer with several filter subjects (nats-server 2.10+)."""
    try:
        version = js._nc.connected_server_version
        return (int(version.major), int(version.minor)) >= (2, 10)
    except (AttributeError, TypeError, ValueError):  # no server info: filter in the client only
        return False


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: `*` is one token, a final `>` one or more."""
    wanted, tokens = pattern.split("."), subject.split(".")
    for i, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > i
        if i >= len(tokens) or token not in ("*", tokens[i]):
            return False
    return len(tokens) == len(wanted)


Handle = Callable[[list[Msg], Retry], Awaitable[None]]
"""What a consumer does with a fetched batch, given the retry rules; acks included."""


@dataclass(frozen=True)
class PullConsumer:
    subject: str
    stream: str
    durable: str
    batch_size: int
    handle: Handle
    max_ack_pending: int = 10_000
    keep: Callable[[Msg], bool] | None = None
    """A partitioned consumer's filter (`rota.bus.partition`): the messages it is not for are
    acked unhandled."""
    family: str | None = None
    """The durables that read these messages before this one (a partitioned durable's family,
    or the one it takes a share of the subjects from): when new, it starts after their lowest
    ack floor."""
    filter_subjects: tuple[str, ...] = ()
    """The subjects under `subject` the handler wants; empty: all of them. The server leaves
    the others out of the durable (nats-server 2.10+, `filter_subjects`; an existing durable's
    filter is updated at start), and what arrives anyway (an older server, or messages of the
    old filter already pending) is acked unread, before its sender is checked."""
    gather_s: float = 0.0
    """After a batch that was not full, wait this long before the next fetch, so that a trickle
    of messages is handled in batches rather than one by one: for a handler whose cost is per
    batch (a transaction) and whose messages may wait that long. 0: fetch again at once."""

    async def run(self, js: JetStreamContext, *, ack_wait_s: float, retry: Retry,
                  senders: SenderCheck | None = None) -> None:
        config = ConsumerConfig(ack_wait=ack_wait_s, max_ack_pending=self.max_ack_pending,
                                max_deliver=retry.max_deliver)
        if self.filter_subjects and server_filters_many(js):
            config.filter_subjects = list(self.filter_subjects)
        if self.family is not None:
            config = starting_at(config, await start_of_new_durable(
                js, self.stream, self.family, self.durable))
        sub = await js.pull_subscribe(
            self.subject, durable=self.durable, stream=self.stream, config=config)
        await self._upgrade(js, config)
        try:
            while True:
                try:
                    batch = await sub.fetch(self.batch_size, timeout=FETCH_WAIT_S)
                except TimeoutError:
                    continue
                except (ConnectionClosedError, ServiceUnavailableError) as exc:
                    log.warning("%s: fetch failed (%s); retrying", self.durable, exc)
                    await asyncio.sleep(retry.delay_s)
                    continue
                fetched = len(batch)
                if self.filter_subjects:
                    batch = await self._own(batch, self._wanted)
                if senders is not None:
                    batch = await believed(batch, senders, self.durable)
                if self.keep is not None:
                    batch = await self._own(batch, self.keep)
                if batch:
                    await self.handle(batch, retry)
                if self.gather_s and fetched < self.batch_size:
                    await asyncio.sleep(self.gather_s)  # a trickle: let a batch gather
        finally:
            # Messages fetched but never handled would make the connection's drain at shutdown
            # wait its whole timeout (30 s) for them; unacked, JetStream redelivers them anyway.
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    @staticmethod
    async def _own(batch: list[Msg], keep: Callable[[Msg], bool]) -> list[Msg]:
        """The messages `keep` keeps (this replica's partition, the subjects it wants); the
        others are acked unread."""
        kept = []
        for msg in batch:
            if keep(msg):
                kept.append(msg)
            else:
                await msg.ack()
        return kept

    def _wanted(self, msg: Msg) -> bool:
        return any(subject_matches(pattern, msg.subject) for pattern in self.filter_subjects)

    async def _upgrade(self, js: JetStreamContext, config: ConsumerConfig) -> None:
        """`pull_subscribe` keeps an existing durable's config as it is; a durable made by an
        older version (no delivery limit, another ack wait, another filter) is updated in
        place. JetStream keeps its position: it only skips what the new filter leaves out."""
        current = (await js.consumer_info(self.stream, self.durable)).config
        wanted: dict[str, Any] = {"ack_wait": config.ack_wait, "max_deliver": config.max_deliver,
                                  "max_ack_pending": config.max_ack_pending}
        if config.filter_subjects:
            wanted |= {"filter_subject": None, "filter_subjects": config.filter_subjects}
        if all(getattr(current, key) == value for key, value in wanted.items()):
            return
        for key, value in wanted.items():
            setattr(current, key, value)
        await js.add_consumer(self.stream, config=current)
        log.info("%s: consumer updated to %s", self.durable, wanted)


def batch_consumer(subject: str, stream: str, durable: str, batch_size: int,
                   handler: BatchHandler, *, keep: Callable[[Msg], bool] | None = None,
                   family: str | None = None, filter_subjects: tuple[str, ...] = (),
                   gather_s: float = 0.0) -> PullConsumer:
    """The whole batch to `handler` (one transaction), acked together. When the batch fails,
    each message is tried again alone, so one message that cannot be handled is nacked for a
    retry on its own instead of holding every message fetched with it back forever. (Bad
    input never gets here: handlers reject it with a reason and go on.)"""

    async def handle(batch: list[Msg], retry: Retry) -> None:
        while True:
            try:
                fail_point(f"handler:{durable}")
                await handler(batch)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if is_transient(exc):
                    await _retry_in_place(batch, durable, exc, retry)
                    continue
                if len(batch) == 1:
                    await retry.failed(batch[0], durable, exc)
                    return
                log.exception("%s: handling a batch of %d failed; trying each alone", durable,
                              len(batch))
                for msg in batch:
                    await handle([msg], retry)
                return
        crash_point(f"before_ack:{durable}")
        for msg in batch:
            await msg.ack()

    return PullConsumer(subject, stream, durable, batch_size, handle, keep=keep, family=family,
                        filter_subjects=filter_subjects, gather_s=gather_s)


def message_consumer(subject: str, stream: str, durable: str, batch_size: int,
                     handler: MessageHandler, *, max_ack_pending: int,
                     keep: Callable[[Msg], bool] | None = None,
                     family: str | None = None) -> PullConsumer:
    """One message at a time, in stream order: each acked once its handler returns (unless
    the handler acked or nacked it itself), or nacked with a delay when it raises, so one
    failing message never holds up the others.

    What FastStream's pull subscriber did for these handlers, without its per-message
    machinery, which cost the ledger about half its CPU on run events it only skips.
    """

    async def handle(batch: list[Msg], retry: Retry) -> None:
        for msg in batch:
            if await _handle_one(msg, retry) and not msg.is_acked:
                crash_point(f"before_ack:{durable}")
                await msg.ack()

    async def _handle_one(msg: Msg, retry: Retry) -> bool:
        """True when the handler returned; on failure the message is settled here."""
        while True:
            try:
                with _consumer_span(msg, durable):
                    fail_point(f"handler:{durable}")
                    await handler(msg)
                return True
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if msg.is_acked:
                    return False
                if is_transient(exc):
                    await _retry_in_place([msg], durable, exc, retry)
                    continue
                await retry.failed(msg, durable, exc)
                return False

    return PullConsumer(subject, stream, durable, batch_size, handle, max_ack_pending,
                        keep=keep, family=family)


def _consumer_span(msg: Msg, durable: str) -> AbstractContextManager[Span]:
    """The span the handler runs in, as FastStream's telemetry middleware made it: a child
    of the context in the message's headers, or, for a bare message about a job (a job's own
    ack, a CLI command), of the job's root, so what the handler writes joins the job's trace
    and nests under the span that caused it."""
    ctx = context_from_headers(msg.headers)
    if ctx is None and (job_id := job_id_of(msg.data)) is not None:
        ctx = job_root_context(job_id)
    return tracer().start_as_current_span(
        f"{msg.subject} process", context=ctx, kind=SpanKind.CONSUMER,
        attributes={"messaging.system": "nats", "messaging.destination.name": msg.subject,
                    "messaging.consumer.group.name": durable})
