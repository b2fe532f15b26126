"""A durable pull consumer that hands a whole batch to one handler (one transaction).

Not FastStream's batch mode: that keeps fetching until a batch is full or its timeout ends,
so a half-full batch waits the whole timeout, and a short timeout orphans messages that
arrive as a fetch expires (they come back only after the ack wait). nats-py's own `fetch`
returns as soon as messages are there, which is the latency we want.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from nats.aio.msg import Msg
from nats.errors import ConnectionClosedError
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig
from nats.js.errors import ServiceUnavailableError

from rota.faults import crash_point

log = logging.getLogger("rota.bus.batch")

BatchHandler = Callable[[list[Msg]], Awaitable[None]]

FETCH_WAIT_S = 5.0
"""How long an idle fetch waits; it returns at once when messages arrive."""


@dataclass(frozen=True)
class BatchConsumer:
    subject: str
    stream: str
    durable: str
    batch_size: int
    handler: BatchHandler

    async def run(self, js: JetStreamContext, *, ack_wait_s: float, retry_delay_s: float) -> None:
        sub = await js.pull_subscribe(
            self.subject, durable=self.durable, stream=self.stream,
            config=ConsumerConfig(ack_wait=ack_wait_s, max_ack_pending=10_000),
        )
        while True:
            try:
                batch = await sub.fetch(self.batch_size, timeout=FETCH_WAIT_S)
            except TimeoutError:
                continue
            except (ConnectionClosedError, ServiceUnavailableError) as exc:
                log.warning("%s: fetch failed (%s); retrying", self.durable, exc)
                await asyncio.sleep(retry_delay_s)
                continue
            try:
                await self.handler(batch)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: handling a batch of %d failed; will retry", self.durable,
                              len(batch))
                for msg in batch:
                    await msg.nak(delay=retry_delay_s)
                continue
            crash_point(f"before_ack:{self.durable}")
            for msg in batch:
                await msg.ack()
