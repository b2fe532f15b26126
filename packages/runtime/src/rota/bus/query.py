"""Request/reply queries: every answer is an `ApiReply` envelope, errors included."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel

from rota.contracts import ContractError, envelope, parse
from rota.contracts import messages as m
from rota.contracts.envelope import correlation
from rota.ids import new_id

Q = TypeVar("Q", bound=BaseModel)

log = logging.getLogger("rota.bus.query")


def api_error(code: str, message: str, field: str | None = None) -> m.ApiReply:
    return m.ApiReply(ok=False, error=m.ApiError(code=code, field=field, message=message))


def internal_error(source: str, exc: Exception, redact: Callable[[str], str] = str) -> m.ApiReply:
    """The answer to a request that failed inside the service: `INTERNAL`, with an id to find
    the detail in the service's log. The detail itself (a database error may quote the
    request, or the schema) is never sent to the caller."""
    error_id = new_id()
    cause = redact(f"{type(exc).__name__}: {exc}".splitlines()[0])[:500]
    log.error("%s: request failed (error %s): %s", source, error_id, cause,
              exc_info=(type(exc), exc, exc.__traceback__))
    return api_error("INTERNAL", f"{source} could not answer; see its log for error {error_id}")


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
    error reply naming its field, and a failure is `INTERNAL` (the cause goes to the log
    only), so the service keeps answering. `redact` scrubs secrets from what is logged."""
    about: dict[str, str] = {}
    try:
        request = parse(raw, model, max_bytes=max_bytes).data
        reply = await run(request)
        about = _about(request) if reply.ok else {}
    except ContractError as exc:
        reply = api_error(exc.code, exc.message, exc.field)
    except Exception as exc:  # the API must answer, and the service must keep running
        reply = internal_error(source, exc, redact)
    command_id, _ = correlation(raw, max_bytes=max_bytes)
    return envelope(reply.model_copy(update={"command_id": command_id}), source=source,
                    job_id=about.get("job_id"), run_id=about.get("run_id")).to_bytes()


def _about(request: BaseModel) -> dict[str, str]:
    """The job and run a request named in full (a run's checkpoint report): its answer's
    envelope names them (contracts/README.md, "Correlation")."""
    found = {}
    for key in ("job_id", "run_id"):
        value = getattr(request, key, None)
        if isinstance(value, str) and len(value) == 36:
            found[key] = value
    return found
