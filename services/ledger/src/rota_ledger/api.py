"""The ledger's read API: core NATS request/reply on `rota.sys.ledger.allocations`.

It lives under `rota.sys.` because `rota.api.>` belongs to the submission service. Requests
are `ListAllocations` envelopes; replies are the usual `ApiReply` envelope, whose `result` is
`{"allocations": [...], "truncated": bool}`: one entry per run, its GPUs grouped back into the
placement it was granted. The scheduler reads it on start to rebuild its view.
"""

from __future__ import annotations

import logging

from rota.contracts import ContractError, envelope, parse
from rota.contracts import messages as m
from rota.contracts.subjects import LEDGER_ALLOCATIONS
from sqlalchemy.ext.asyncio import AsyncEngine

from rota_ledger import store

log = logging.getLogger("rota.ledger.api")

ALLOCATIONS_SUBJECT = LEDGER_ALLOCATIONS
SOURCE = "ledger"


def _error(code: str, message: str, field: str | None = None) -> m.ApiReply:
    return m.ApiReply(ok=False, error=m.ApiError(code=code, field=field, message=message))


async def list_allocations(engine: AsyncEngine, query: m.ListAllocations) -> m.ApiReply:
    async with engine.connect() as conn:
        # One more than asked tells whether the answer is complete.
        runs = await store.list_allocations(conn, active_only=query.active_only,
                                            limit=query.limit + 1, job_id=query.job_id)
    return m.ApiReply(ok=True, result={"allocations": runs[: query.limit],
                                       "truncated": len(runs) > query.limit})


async def answer(engine: AsyncEngine, raw: bytes, *, max_bytes: int) -> bytes:
    """One request's reply, always an envelope: errors are replies, never exceptions."""
    try:
        reply = await list_allocations(engine, parse(raw, m.ListAllocations, max_bytes=max_bytes).data)
    except ContractError as exc:
        reply = _error(exc.code, exc.message, exc.field)
    except Exception as exc:  # the API must answer, and the service must keep running
        log.exception("listing allocations failed")
        reply = _error("UNAVAILABLE", f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
    return envelope(reply, source=SOURCE).to_bytes()
