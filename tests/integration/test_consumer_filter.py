"""A durable's filter subjects, on a real JetStream: a durable made with the whole subject by
an older version is narrowed in place at start and keeps its position, the handler sees only
the subjects it wants, in order, and nothing is left unacked; on a server that cannot filter
by several subjects, the consumer acks the others unread itself."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig
from rota.bus import batch
from rota.bus.batch import Retry, batch_consumer, subject_matches
from rota.contracts.subjects import STREAM_EVT


@pytest.mark.parametrize("server_filters", [True, False], ids=["server", "client"])
async def test_an_old_durable_is_narrowed_to_its_filter_subjects_and_keeps_its_place(
    nc: Client, monkeypatch: pytest.MonkeyPatch, server_filters: bool
) -> None:
    if not server_filters:  # as on nats-server 2.9, which CI may run against
        monkeypatch.setattr(batch, "server_filters_many", lambda js: False)
    js = nc.jetstream()
    if server_filters and not batch.server_filters_many(js):
        pytest.skip("this nats-server (before 2.10) cannot filter a durable by several subjects;"
                    " the client variant covers it, and the embedded server runs this one")
    tag = uuid.uuid4().hex[:8]
    root = f"rota.evt.test{tag}"
    durable = f"test-filter-{tag}"
    # The older version's durable: the whole subject, one message handled and acked.
    old = await js.pull_subscribe(f"{root}.>", durable=durable, stream=STREAM_EVT,
                                  config=ConsumerConfig(ack_wait=30))
    await js.publish(f"{root}.wanted", b"handled before", stream=STREAM_EVT)
    (msg,) = await old.fetch(1, timeout=5)
    await msg.ack_sync()
    await old.unsubscribe()
    published = [(f"{root}.{kind}", f"{kind}-{i}".encode())
                 for i in range(3) for kind in ("wanted", "skipped", "also")]
    for subject, body in published:
        await js.publish(subject, body, stream=STREAM_EVT)

    seen: list[bytes] = []

    async def handler(msgs: list[Msg]) -> None:
        seen.extend(m.data for m in msgs)

    consumer = batch_consumer(f"{root}.>", STREAM_EVT, durable, 4, handler,
                              filter_subjects=(f"{root}.wanted", f"{root}.also"), gather_s=0.05)
    task = asyncio.create_task(consumer.run(js, ack_wait_s=30, retry=Retry(0.1)))
    try:
        for _ in range(100):
            info = await js.consumer_info(STREAM_EVT, durable)
            if len(seen) >= 6 and info.num_ack_pending == 0 and info.num_pending == 0:
                break
            await asyncio.sleep(0.1)
        assert seen == [body for subject, body in published if not subject.endswith("skipped")]
        assert info.num_ack_pending == 0 and info.num_pending == 0
        if server_filters:
            assert info.config.filter_subjects == [f"{root}.wanted", f"{root}.also"]
            assert not info.config.filter_subject
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await js.delete_consumer(STREAM_EVT, durable)


def test_subject_matching_follows_nats_wildcards() -> None:
    assert subject_matches("rota.evt.run.started", "rota.evt.run.started")
    assert not subject_matches("rota.evt.run.started", "rota.evt.run.started.x")
    assert subject_matches("rota.evt.*.started", "rota.evt.run.started")
    assert not subject_matches("rota.evt.*", "rota.evt.run.started")
    assert subject_matches("rota.evt.>", "rota.evt.run.started")
    assert not subject_matches("rota.evt.run.>", "rota.evt.run")
