"""The executor's side of the run protocol, played by a test on real NATS, so that the SDK's own
behaviour (what it sends, how it waits, retries and reports a refusal) is checked alone. The
executor's side is tested against the real executor in tests/integration/executor."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from nats.aio.client import Client
from nats.aio.msg import Msg
from rota.bus.query import api_error
from rota.contracts import envelope, parse
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.flushed import flushed

MAX_BYTES = 64 * 1024


@dataclass
class ExecutorSide:
    refuse: bool = False
    reports: list[m.ReportCheckpoint] = field(default_factory=list)

    async def answer(self, msg: Msg) -> None:
        report = parse(msg.data, m.ReportCheckpoint, max_bytes=MAX_BYTES).data
        self.reports.append(report)
        reply = (api_error("UNAUTHORISED", "not this run's token", "run_token") if self.refuse
                 else m.ApiReply(ok=True, result={"recorded": True}))
        await msg.respond(envelope(reply, source="executor").to_bytes())


@asynccontextmanager
async def executor_side(nc: Client, run_id: str, *, refuse: bool = False
                        ) -> AsyncIterator[ExecutorSide]:
    side = ExecutorSide(refuse=refuse)
    sub = await nc.subscribe(s.run_checkpoint(run_id), cb=side.answer)
    await flushed(nc)
    try:
        yield side
    finally:
        await sub.unsubscribe()
