"""A small NATS client for the CLI: request/reply on `rota.api.*` with clear failures."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from pydantic import BaseModel

from rota.bus.options import connect_options, creds_team
from rota.cli.output import CommandFailed, InvalidInput
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.subjects import TEAM_QUERIES, team_query
from rota.endpoints import resolve
from rota.settings import Settings

SOURCE = "cli"

# Server-side codes that mean "Rota failed" (exit 1); every other code is bad input (exit 2).
FAILURE_CODES = {"UNAVAILABLE", "INTERNAL"}


async def request(settings: Settings, subject: str, data: BaseModel) -> Any:
    """Send one API request and return its `result`, or raise with the server's reason."""
    url = resolve(settings, need_database=False).nats_url
    team = creds_team(settings.nats_creds) if settings.nats_creds is not None else None
    if subject in TEAM_QUERIES and team is not None:
        subject = team_query(subject, team)  # all a team identity may ask
    refusals: list[str] = []

    async def on_error(exc: Exception) -> None:
        if "violation" in str(exc).lower():
            refusals.append(str(exc))

    try:
        nc = await nats.connect(
            url, connect_timeout=3, allow_reconnect=False, max_reconnect_attempts=0,
            error_cb=on_error, **connect_options(settings),
        )
    except (TimeoutError, OSError, NatsTimeout, nats.errors.NoServersError) as exc:
        raise CommandFailed(f"cannot reach NATS at {url}: {exc or type(exc).__name__}") from None
    try:
        raw = await nc.request(
            subject, envelope(data, source=SOURCE).to_bytes(), timeout=settings.request_timeout_s
        )
    except NoRespondersError:
        raise CommandFailed(f"no service answers {subject}: is the submission service up?") from None
    except NatsTimeout:
        if refusals:  # the server refused the publish: these credentials may not ask that
            raise CommandFailed(f"NATS refused {subject}: {refusals[0]}") from None
        raise CommandFailed(f"no answer on {subject} in {settings.request_timeout_s:.0f} s") from None
    finally:
        await nc.close()
    reply = m.ApiReply.model_validate(json.loads(raw.data)["data"])
    if not reply.ok:
        assert reply.error is not None
        if reply.error.code in FAILURE_CODES:
            raise CommandFailed(reply.error.message)
        raise InvalidInput(reply.error.message, reply.error.field, reply.error.code)
    return reply.result


def call(settings: Settings, subject: str, data: BaseModel) -> Any:
    return asyncio.run(request(settings, subject, data))
