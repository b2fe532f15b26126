"""The read API behind `rota notifications`: core NATS request/reply on `rota.sys.notifier.list`.

It lives under `rota.sys.` because `rota.api.>` belongs to the submission service. Requests
are `ListNotifications` envelopes; replies are the usual `ApiReply` envelope.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from rota.bus.query import answer_query
from rota.contracts import messages as m
from rota.contracts.subjects import NOTIFICATIONS_LIST
from sqlalchemy.ext.asyncio import AsyncEngine

from rota_notifier import store
from rota_notifier.redact import Redactor

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
    engine: AsyncEngine, query: m.ListNotifications, redactor: Redactor,
    channels: Collection[str],
) -> m.ApiReply:
    async with engine.connect() as conn:
        rows = await store.list_notifications(conn, failed=query.failed, limit=query.limit,
                                              job_id=query.job_id)
    listed = [_jsonable(row, redactor) for row in rows]
    if query.with_channels:
        return m.ApiReply(ok=True, result={"channels": sorted(channels), "notifications": listed})
    return m.ApiReply(ok=True, result=listed)


async def answer(engine: AsyncEngine, raw: bytes, redactor: Redactor, *,
                 channels: Collection[str]) -> bytes:
    """One request's reply, always an envelope: errors are replies, never exceptions.
    `channels`: those configured, which a request `with_channels` is told."""
    return await answer_query(
        raw, m.ListNotifications, lambda q: list_notifications(engine, q, redactor, channels),
        source=SOURCE, max_bytes=MAX_REQUEST_BYTES, redact=redactor.redact,
    )
