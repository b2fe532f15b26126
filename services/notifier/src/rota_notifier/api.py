"""The read API behind `rota notifications`: core NATS request/reply on `rota.sys.notifier.list`.

It lives under `rota.sys.` because `rota.api.>` belongs to the submission service. Requests
are `ListNotifications` envelopes; replies are the usual `ApiReply` envelope.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from rota.contracts import ContractError, envelope, parse
from rota.contracts import messages as m
from rota.contracts.subjects import NOTIFICATIONS_LIST
from sqlalchemy.ext.asyncio import AsyncEngine

from rota_notifier import store
from rota_notifier.redact import Redactor

log = logging.getLogger("rota.notifier.api")

LIST_SUBJECT = NOTIFICATIONS_LIST
MAX_REQUEST_BYTES = 64 * 1024
SOURCE = "notifier"


def _jsonable(row: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, str) and key == "last_error":
            value = redactor.redact(value)  # stored redacted already; this is the second lock
        out[key] = value
    return out


async def list_notifications(
    engine: AsyncEngine, query: m.ListNotifications, redactor: Redactor
) -> m.ApiReply:
    async with engine.connect() as conn:
        rows = await store.list_notifications(conn, failed=query.failed, limit=query.limit,
                                              job_id=query.job_id)
    return m.ApiReply(ok=True, result=[_jsonable(row, redactor) for row in rows])


def _error(code: str, message: str, field: str | None = None) -> m.ApiReply:
    return m.ApiReply(ok=False, error=m.ApiError(code=code, field=field, message=message))


async def answer(engine: AsyncEngine, raw: bytes, redactor: Redactor) -> bytes:
    """One request's reply, always an envelope: errors are replies, never exceptions."""
    try:
        query = parse(raw, m.ListNotifications, max_bytes=MAX_REQUEST_BYTES).data
        reply = await list_notifications(engine, query, redactor)
    except ContractError as exc:
        reply = _error(exc.code, exc.message, exc.field)
    except Exception as exc:  # the API must answer, and the service must keep running
        log.warning("list failed: %s", redactor.redact(f"{type(exc).__name__}: {exc}"))
        reply = _error("UNAVAILABLE", redactor.redact(f"{type(exc).__name__}: {exc}")[:500])
    return envelope(reply, source=SOURCE).to_bytes()

