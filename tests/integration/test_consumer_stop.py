"""A stopped pull consumer lets its connection drain: messages that reach it late hold nothing."""

from __future__ import annotations

import asyncio

import nats
from nats.aio.msg import Msg
from nats.errors import DrainTimeoutError
from nats.js.api import StreamConfig
from rota.bus.batch import Retry, message_consumer
from rota.endpoints import Endpoints
from rota.ids import new_id
from rota.service import stop_tasks


async def test_a_stopped_consumer_leaves_nothing_for_the_drain_to_wait_for(
    endpoints: Endpoints,
) -> None:
    errors: list[Exception] = []

    async def record(error: Exception) -> None:
        errors.append(error)

    stream, subject = f"STOPTEST_{new_id()[-8:]}", f"stoptest.{new_id()[-8:]}"
    admin = await nats.connect(endpoints.nats_url)
    nc = await nats.connect(endpoints.nats_url, drain_timeout=5, error_cb=record)
    try:
        await admin.jetstream().add_stream(StreamConfig(name=stream, subjects=[subject]))
        handled: list[bytes] = []

        async def handle(msg: Msg) -> None:
            handled.append(msg.data)

        consumer = message_consumer(subject, stream, "stoptest", 20, handle, max_ack_pending=100)
        task = asyncio.create_task(consumer.run(nc.jetstream(), ack_wait_s=30, retry=Retry(0.1)))
        await asyncio.sleep(1.0)  # its fetch is waiting: a pull request is open on the server
        await stop_tasks([task])
        # The server still answers that open request: these land in the stopped consumer's inbox.
        for i in range(20):
            await admin.jetstream().publish(subject, str(i).encode())
        await asyncio.sleep(0.5)
        await nc.drain()
        assert not [e for e in errors if isinstance(e, DrainTimeoutError)], errors
    finally:
        if not nc.is_closed:
            await nc.close()
        await admin.jetstream().delete_stream(stream)
        await admin.close()
