"""Request/reply queries: every answer is an `ApiReply` envelope, errors included."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel

from rota.contracts import ContractError, envelope, parse
from rota.contracts import messages as m

Q = TypeVar("Q", bound=BaseModel)

log = logging.getLogger("rota.bus.query")


def api_error(code: str, message: str, field: str | None = None) -> m.ApiReply:
    return m.ApiReply(ok=False, error=m.ApiError(code=code, field=field, message=message))


async def answer_query(
    raw: bytes,
    model: type[Q],
    run: Callable[[Q], Awaitable[m.ApiReply]],
    *,
    source: str,
    max_bytes: int,
    redact: Callable[[str], str] = lambda text: text,
) -> bytes:
    """Parse one request as `model`, run it, and reply. Never raises: a bad request is an
    error reply naming its field, and a failure is `UNAVAILABLE` with a one-line cause, so
    the service keeps answering. `redact` scrubs secrets a failure might quote."""
    try:
        reply = await run(parse(raw, model, max_bytes=max_bytes).data)
    except ContractError as exc:
        reply = api_error(exc.code, exc.message, exc.field)
    except Exception as exc:  # the API must answer, and the service must keep running
        cause = redact(f"{type(exc).__name__}: {exc}".splitlines()[0])[:500]
        log.warning("%s query failed: %s", source, cause)
        reply = api_error("UNAVAILABLE", cause)
    return envelope(reply, source=source).to_bytes()
