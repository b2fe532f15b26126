"""The pull consumers' ack rules, on stand-in messages: what is acked, what is retried."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from nats.aio.msg import Msg
from rota.bus.batch import Retry, batch_consumer, message_consumer


class FakeMsg:
    def __init__(self, data: bytes, delivered: int = 1) -> None:
        self.data = data
        self.subject = "rota.test"
        self.headers: dict[str, str] | None = None
        self.outcome: str | None = None
        self.metadata = SimpleNamespace(num_delivered=delivered)
        self.in_progress_calls = 0

    async def term(self) -> None:
        assert self.outcome is None
        self.outcome = "term"

    async def in_progress(self) -> None:
        self.in_progress_calls += 1

    @property
    def is_acked(self) -> bool:
        return self.outcome is not None

    async def ack(self) -> None:
        assert self.outcome is None
        self.outcome = "ack"

    async def nak(self, delay: float | None = None) -> None:
        assert self.outcome is None
        self.outcome = "nak"


def fakes(*bodies: bytes) -> list[FakeMsg]:
    return [FakeMsg(body) for body in bodies]


async def test_a_batch_that_fails_is_retried_message_by_message() -> None:
    handled: list[list[bytes]] = []

    async def handler(batch: list[Msg]) -> None:
        if any(msg.data == b"poison" for msg in batch):
            raise RuntimeError("cannot handle this one")
        handled.append([msg.data for msg in batch])

    consumer = batch_consumer("rota.test", "S", "d", 8, handler)
    msgs = fakes(b"a", b"poison", b"b")
    await consumer.handle(cast(list[Msg], msgs), Retry(1.0))
    assert [m.outcome for m in msgs] == ["ack", "nak", "ack"]
    assert handled == [[b"a"], [b"b"]]


async def test_a_batch_that_succeeds_is_acked_together() -> None:
    async def handler(batch: list[Msg]) -> None:
        return None

    msgs = fakes(b"a", b"b")
    consumer = batch_consumer("rota.test", "S", "d", 8, handler)
    await consumer.handle(cast(list[Msg], msgs), Retry(1.0))
    assert [m.outcome for m in msgs] == ["ack", "ack"]


@pytest.mark.parametrize("own", [None, "nak", "ack"])
async def test_each_message_is_acked_nacked_or_left_to_its_handler(own: str | None) -> None:
    async def handler(msg: Msg) -> None:
        if msg.data == b"boom":
            raise RuntimeError("the database is away")
        if msg.data == b"own" and own is not None:
            await getattr(msg, own)()

    msgs = fakes(b"a", b"boom", b"own")
    consumer = message_consumer("rota.test", "S", "d", 8, handler, max_ack_pending=10)
    await consumer.handle(cast(Any, msgs), Retry(1.0))
    assert [m.outcome for m in msgs] == ["ack", "nak", own or "ack"]


class DeadLetterBox:
    def __init__(self) -> None:
        self.kept: list[tuple[bytes, str, str]] = []

    async def __call__(self, msg: Msg, consumer: str, exc: BaseException) -> None:
        self.kept.append((msg.data, consumer, type(exc).__name__))


@pytest.mark.parametrize("batched", [False, True])
async def test_the_last_delivery_of_a_failing_message_goes_to_the_dead_letter(
        batched: bool) -> None:
    async def one(msg: Msg) -> None:
        if msg.data == b"poison":
            raise KeyError("never handled")

    async def many(batch: list[Msg]) -> None:
        for msg in batch:
            await one(msg)

    box = DeadLetterBox()
    consumer = (batch_consumer("rota.test", "S", "d", 8, many) if batched
                else message_consumer("rota.test", "S", "d", 8, one, max_ack_pending=10))
    msgs = [FakeMsg(b"poison", delivered=2), FakeMsg(b"poison", delivered=3), FakeMsg(b"ok", 3)]
    await consumer.handle(cast(list[Msg], msgs), Retry(0.0, max_deliver=3, dead_letter=box))
    assert [m.outcome for m in msgs] == ["nak", "term", "ack"]
    assert box.kept == [(b"poison", "d", "KeyError")]


async def test_an_outage_is_retried_in_place_without_using_a_delivery() -> None:
    calls = 0

    async def handler(msg: Msg) -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionRefusedError("the database is away")

    box = DeadLetterBox()
    msg = FakeMsg(b"a", delivered=1)
    consumer = message_consumer("rota.test", "S", "d", 8, handler, max_ack_pending=10)
    await consumer.handle(cast(list[Msg], [msg]), Retry(0.0, max_deliver=1, dead_letter=box))
    assert (msg.outcome, calls, box.kept) == ("ack", 3, [])
    assert msg.in_progress_calls == 2
