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
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig
from nats.js.errors import ServiceUnavailableError
from opentelemetry.trace import Span, SpanKind

from rota.bus.trace_fill import job_id_of
from rota.faults import crash_point
from rota.tracing import context_from_headers, job_root_context, tracer

log = logging.getLogger("rota.bus.batch")

BatchHandler = Callable[[list[Msg]], Awaitable[None]]
MessageHandler = Callable[[Msg], Awaitable[None]]

FETCH_WAIT_S = 5.0
"""How long an idle fetch waits; it returns at once when messages arrive."""


Handle = Callable[[list[Msg], float], Awaitable[None]]
"""What a consumer does with a fetched batch, given the retry delay; acks included."""


@dataclass(frozen=True)
class PullConsumer:
    subject: str
    stream: str
    durable: str
    batch_size: int
    handle: Handle
    max_ack_pending: int = 10_000

    async def run(self, js: JetStreamContext, *, ack_wait_s: float, retry_delay_s: float) -> None:
        sub = await js.pull_subscribe(
            self.subject, durable=self.durable, stream=self.stream,
            config=ConsumerConfig(ack_wait=ack_wait_s, max_ack_pending=self.max_ack_pending),
        )
        try:
            while True:
                try:
                    batch = await sub.fetch(self.batch_size, timeout=FETCH_WAIT_S)
                except TimeoutError:
                    continue
                except (ConnectionClosedError, ServiceUnavailableError) as exc:
                    log.warning("%s: fetch failed (%s); retrying", self.durable, exc)
                    await asyncio.sleep(retry_delay_s)
                    continue
                await self.handle(batch, retry_delay_s)
        finally:
            # Messages fetched but never handled would make the connection's drain at shutdown
            # wait its whole timeout (30 s) for them; unacked, JetStream redelivers them anyway.
            with contextlib.suppress(Exception):
                await sub.unsubscribe()


def batch_consumer(subject: str, stream: str, durable: str, batch_size: int,
                   handler: BatchHandler) -> PullConsumer:
    """The whole batch to `handler` (one transaction), acked together. When the batch fails,
    each message is tried again alone, so one message that cannot be handled is nacked for a
    retry on its own instead of holding every message fetched with it back forever. (Bad
    input never gets here: handlers reject it with a reason and go on.)"""

    async def handle(batch: list[Msg], retry_delay_s: float) -> None:
        try:
            await handler(batch)
        except asyncio.CancelledError:
            raise
        except Exception:
            if len(batch) == 1:
                log.exception("%s: handling %s failed; will retry", durable, batch[0].subject)
                await batch[0].nak(delay=retry_delay_s)
                return
            log.exception("%s: handling a batch of %d failed; trying each alone", durable,
                          len(batch))
            for msg in batch:
                await handle([msg], retry_delay_s)
            return
        crash_point(f"before_ack:{durable}")
        for msg in batch:
            await msg.ack()

    return PullConsumer(subject, stream, durable, batch_size, handle)


def message_consumer(subject: str, stream: str, durable: str, batch_size: int,
                     handler: MessageHandler, *, max_ack_pending: int) -> PullConsumer:
    """One message at a time, in stream order: each acked once its handler returns (unless
    the handler acked or nacked it itself), or nacked with a delay when it raises, so one
    failing message never holds up the others.

    What FastStream's pull subscriber did for these handlers, without its per-message
    machinery, which cost the ledger about half its CPU on run events it only skips.
    """

    async def handle(batch: list[Msg], retry_delay_s: float) -> None:
        for msg in batch:
            try:
                with _consumer_span(msg, durable):
                    await handler(msg)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: handling %s failed; will retry", durable, msg.subject)
                if not msg.is_acked:
                    await msg.nak(delay=retry_delay_s)
                continue
            if not msg.is_acked:
                crash_point(f"before_ack:{durable}")
                await msg.ack()

    return PullConsumer(subject, stream, durable, batch_size, handle, max_ack_pending)


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
