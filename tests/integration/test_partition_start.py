"""A partitioned durable that is new (the number of replicas changed) starts after the lowest
ack floor of its family, on a real JetStream: nothing unacked is skipped, the acked past is
not replayed."""

from __future__ import annotations

import uuid

from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from rota.bus.partition import start_of_new_durable, starting_at
from rota.contracts.subjects import STREAM_EVT


async def test_a_new_partition_durable_starts_after_its_familys_lowest_ack_floor(nc: Client) -> None:
    js = nc.jetstream()
    tag = uuid.uuid4().hex[:8]
    subject = f"rota.evt.test.partition{tag}"
    family = f"test-family-{tag}"
    first = (await js.publish(subject, b"0", stream=STREAM_EVT)).seq
    for i in range(1, 6):
        await js.publish(subject, str(i).encode(), stream=STREAM_EVT)
    # The old single durable acked the first three; an older partition one acked all five.
    ahead = ConsumerConfig(filter_subject=subject, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                           opt_start_seq=first, ack_policy=AckPolicy.EXPLICIT)
    for durable, acked in ((family, 3), (f"{family}-p0of3", 6)):
        sub = await js.pull_subscribe(subject, durable=durable, stream=STREAM_EVT, config=ahead)
        for msg in await sub.fetch(acked, timeout=5):
            await msg.ack_sync()
        await sub.unsubscribe()
    try:
        # Another family's name that only starts alike is not one of it.
        assert await start_of_new_durable(js, STREAM_EVT, f"test-family-{tag[:4]}",
                                          f"test-family-{tag[:4]}-p0of2") is None
        new = f"{family}-p1of2"
        start = await start_of_new_durable(js, STREAM_EVT, family, new)
        assert start is not None
        sub = await js.pull_subscribe(subject, durable=new, stream=STREAM_EVT, config=starting_at(
            ConsumerConfig(ack_policy=AckPolicy.EXPLICIT), start))
        got = [m.data for m in await sub.fetch(10, timeout=2)]
        assert got == [b"3", b"4", b"5"]
        await sub.unsubscribe()
        # Once it exists, it resumes where it is.
        assert await start_of_new_durable(js, STREAM_EVT, family, new) is None
    finally:
        for durable in (family, f"{family}-p0of3", f"{family}-p1of2"):
            await js.delete_consumer(STREAM_EVT, durable)
