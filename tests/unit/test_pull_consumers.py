"""The pull consumers' ack rules, on stand-in messages: what is acked, what is retried."""

from __future__ import annotations

from typing import Any, cast

import pytest
from nats.aio.msg import Msg
from rota.bus.batch import batch_consumer, message_consumer


class FakeMsg:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.subject = "rota.test"
        self.headers: dict[str, str] | None = None
        self.outcome: str | None = None

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
    await consumer.handle(cast(list[Msg], msgs), 1.0)
    assert [m.outcome for m in msgs] == ["ack", "nak", "ack"]
    assert handled == [[b"a"], [b"b"]]


async def test_a_batch_that_succeeds_is_acked_together() -> None:
    async def handler(batch: list[Msg]) -> None:
        return None

    msgs = fakes(b"a", b"b")
    await batch_consumer("rota.test", "S", "d", 8, handler).handle(cast(list[Msg], msgs), 1.0)
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
    await consumer.handle(cast(Any, msgs), 1.0)
    assert [m.outcome for m in msgs] == ["ack", "nak", own or "ack"]
