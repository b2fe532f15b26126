"""The ledger's read API: core NATS request/reply on `rota.sys.ledger.allocations`.

It lives under `rota.sys.` because `rota.api.>` belongs to the submission service. Requests
are `ListAllocations` envelopes; replies are the usual `ApiReply` envelope, whose `result` is
`{"allocations": [...], "truncated": bool}`: one entry per run, its GPUs grouped back into the
placement it was granted. The scheduler reads it on start to rebuild its view.
"""

from __future__ import annotations

from rota.bus.query import answer_query
from rota.contracts import messages as m
from rota.contracts.subjects import LEDGER_ALLOCATIONS
from sqlalchemy.ext.asyncio import AsyncEngine

from rota_ledger import store

ALLOCATIONS_SUBJECT = LEDGER_ALLOCATIONS
SOURCE = "ledger"


async def list_allocations(engine: AsyncEngine, query: m.ListAllocations) -> m.ApiReply:
    async with engine.connect() as conn:
        # One more than asked tells whether the answer is complete.
        runs = await store.list_allocations(conn, active_only=query.active_only,
                                            limit=query.limit + 1, job_id=query.job_id)
    return m.ApiReply(ok=True, result={"allocations": runs[: query.limit],
                                       "truncated": len(runs) > query.limit})


async def answer(engine: AsyncEngine, raw: bytes, *, max_bytes: int) -> bytes:
    """One request's reply, always an envelope: errors are replies, never exceptions."""
    return await answer_query(raw, m.ListAllocations, lambda q: list_allocations(engine, q),
                              source=SOURCE, max_bytes=max_bytes)
