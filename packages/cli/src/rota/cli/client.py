"""A small NATS client for the CLI: request/reply on `rota.api.*` with clear failures."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rota.cli.output import CommandFailed, InvalidInput

if TYPE_CHECKING:  # nats-py, the contracts and the settings load with the first request
    from nats.aio.client import Client
    from pydantic import BaseModel

    from rota.settings import Settings

SOURCE = "cli"

# Server-side codes that mean "Rota failed" (exit 1); every other code is bad input (exit 2).
FAILURE_CODES = {"UNAVAILABLE", "INTERNAL"}


@dataclass
class Connection:
    nc: Client
    team: str | None
    """The team of the credentials, when they are a team's."""
    refusals: list[str] = field(default_factory=list)
    """The server's permission refusals, which nats-py reports only to the error callback."""


@asynccontextmanager
async def connected(settings: Settings) -> AsyncIterator[Connection]:
    import nats
    from nats.errors import TimeoutError as NatsTimeout

    from rota.bus.options import connect_options, creds_team
    from rota.endpoints import resolve

    url = resolve(settings, need_database=False).nats_url
    team = creds_team(settings.nats_creds) if settings.nats_creds is not None else None
    refusals: list[str] = []

    async def on_error(exc: Exception) -> None:
        if "violation" in str(exc).lower():
            refusals.append(str(exc))

    try:
        nc = await nats.connect(
            # nats-py reads 0 attempts as "no limit" on the first connect too: 1 gives up.
            url, connect_timeout=3, allow_reconnect=False, max_reconnect_attempts=1,
            reconnect_time_wait=0.2,
            error_cb=on_error, **connect_options(settings),
        )
    except (TimeoutError, OSError, NatsTimeout, nats.errors.NoServersError) as exc:
        raise CommandFailed(f"cannot reach NATS at {url}: {exc or type(exc).__name__}") from None
    try:
        yield Connection(nc, team, refusals)
    finally:
        await nc.close()


def refused_to_team(settings: Settings, subject: str, team: str) -> str | None:
    """Why a team's credentials may not ask `subject`, said before the server refuses it
    with a bare permissions violation; None when they may."""
    # Only team credentials come here: the admin's (those of `rota up`) skip the tables.
    from rota.auth.keys import ADMIN, AuthDir
    from rota.auth.permissions import team_subjects
    from rota.contracts.subjects import TEAM_QUERIES, team_query

    asked = team_query(subject, team) if subject in TEAM_QUERIES else subject
    if asked in team_subjects(team):
        return None
    admin = AuthDir(settings.home / "auth").creds_path(ADMIN)
    return (f"this needs the admin's credentials ({subject} is not a team's to ask), and "
            f"ROTA_NATS_CREDS ({settings.nats_creds}) are team {team}'s: set ROTA_NATS_CREDS to {admin} "
            "(which `rota up` or `rota auth init` makes), or see your team's view in the "
            "console")


async def request(settings: Settings, subject: str, data: BaseModel) -> Any:
    """Send one API request and return its `result`, or raise with the server's reason."""
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeout

    from rota.bus.options import creds_team
    from rota.contracts import envelope
    from rota.contracts import messages as m
    from rota.contracts.subjects import TEAM_QUERIES, team_query

    team = creds_team(settings.nats_creds) if settings.nats_creds is not None else None
    if team is not None and (refused := refused_to_team(settings, subject, team)):
        raise CommandFailed(refused)
    async with connected(settings) as conn:
        if subject in TEAM_QUERIES and conn.team is not None:
            subject = team_query(subject, conn.team)  # all a team identity may ask
        try:
            raw = await conn.nc.request(subject, envelope(data, source=SOURCE).to_bytes(),
                                        timeout=settings.request_timeout_s)
        except NoRespondersError:
            raise CommandFailed(
                f"no service answers {subject}: is the submission service up?") from None
        except NatsTimeout:
            if conn.refusals:  # the server refused the publish: these credentials may not
                raise CommandFailed(f"NATS refused {subject}: {conn.refusals[0]}") from None
            raise CommandFailed(
                f"no answer on {subject} in {settings.request_timeout_s:.0f} s") from None
    reply = m.ApiReply.model_validate(json.loads(raw.data)["data"])
    if not reply.ok:
        assert reply.error is not None
        if reply.error.code in FAILURE_CODES:
            raise CommandFailed(reply.error.message)
        raise InvalidInput(reply.error.message, reply.error.field, reply.error.code)
    return reply.result


def call(settings: Settings, subject: str, data: BaseModel) -> Any:
    import asyncio

    return asyncio.run(request(settings, subject, data))
