"""The dead letter: a message that failed on its last allowed delivery (`ROTA_MAX_DELIVER`)
is kept in the service's own `deadletter` table, then terminated, so it stops coming back
and an operator can see why (`rota deadletter`, over `rota.sys.deadletter.<service>`).

The payload is kept truncated, with the values of secret keys (run tokens) blanked out
first; the error keeps its type and first line, without anything that cannot be stored.
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa
from nats.aio.msg import Msg
from sqlalchemy.ext.asyncio import AsyncEngine

from rota.contracts import messages as m
from rota.db.tables import deadletter_table

MAX_PAYLOAD_BYTES = 8192
MAX_ERROR_CHARS = 2000

# On the raw bytes, not parsed JSON: the message that failed may not parse at all.
_SECRET_VALUE = re.compile(
    rb'("(?:run_token|token|password|secret)"\s*:\s*)"(?:[^"\\]|\\.)*"', re.IGNORECASE)


def redact(raw: bytes) -> bytes:
    """`raw` with the string value of every secret-named key replaced."""
    return _SECRET_VALUE.sub(rb'\1"[redacted]"', raw)


def _storable(text: str) -> str:
    """Text PostgreSQL can hold: no NUL, no lone surrogate."""
    return text.replace("\x00", "\\0").encode("utf-8", "backslashreplace").decode()


def _secrets_in(raw: bytes) -> list[str]:
    return [match.group(0).decode(errors="replace").split(":", 1)[1].strip().strip('"')
            for match in _SECRET_VALUE.finditer(raw)]


class DeadLetters:
    def __init__(self, schema: str) -> None:
        self.table = deadletter_table(sa.MetaData(), schema)

    async def record(self, engine: AsyncEngine, msg: Msg, consumer: str,
                     exc: BaseException) -> None:
        """Keep `msg` and why it failed. Once per (consumer, stream sequence)."""
        from sqlalchemy.dialects.postgresql import insert

        meta = msg.metadata
        error = str(exc).splitlines()[0] if str(exc) else ""
        for secret in _secrets_in(msg.data):  # an error may quote the payload
            if secret:
                error = error.replace(secret, "[redacted]")
        async with engine.begin() as conn:
            await conn.execute(insert(self.table).values(
                consumer=consumer, stream=meta.stream, subject=msg.subject,
                stream_seq=meta.sequence.stream, deliveries=meta.num_delivered or 1,
                error_type=type(exc).__name__, error=_storable(error)[:MAX_ERROR_CHARS],
                payload=redact(msg.data)[:MAX_PAYLOAD_BYTES], payload_bytes=len(msg.data),
            ).on_conflict_do_nothing())

    async def list(self, engine: AsyncEngine, query: m.ListDeadLetters) -> list[dict[str, Any]]:
        t = self.table
        stmt = sa.select(t).order_by(t.c.id.desc()).limit(query.limit)
        async with engine.connect() as conn:
            rows = (await conn.execute(stmt)).all()
        return [{
            "id": row.id, "consumer": row.consumer, "stream": row.stream,
            "subject": row.subject, "stream_seq": row.stream_seq,
            "deliveries": row.deliveries, "error_type": row.error_type, "error": row.error,
            "payload": _storable(bytes(row.payload).decode(errors="replace")),
            "payload_bytes": row.payload_bytes,
            "truncated": row.payload_bytes > len(row.payload),
            "created_at": row.created_at.isoformat() if row.created_at else None,
        } for row in rows]
