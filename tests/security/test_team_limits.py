"""A team's credentials carry the server's limits: a message far above Rota's message cap,
or more subscriptions than a team needs, is refused by a real nats-server on Rota's
generated config, before any service or stream sees it."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import nats
import pytest
from nats.errors import ConnectionClosedError
from rota.auth.jwt import claims_of, read_creds
from rota.auth.keys import ADMIN, DEFAULT_TEAM_LIMITS, AuthDir, TeamLimits
from rota.auth.permissions import team_inbox
from rota.bus.broker import ensure_streams
from rota.contracts.subjects import STREAM_CMD, submit, team_feed
from rota.embedded import EmbeddedNats
from rota.flushed import flushed

from tests.integration.security.test_permissions import Identity


@pytest.fixture(scope="module")
def server(secure_nats: tuple[EmbeddedNats, AuthDir]) -> tuple[EmbeddedNats, AuthDir]:
    return secure_nats


async def _stored(url: str, auth: AuthDir, subject: str) -> int:
    admin = await nats.connect(url, user_credentials=str(auth.creds_path(ADMIN)))
    js = admin.jetstream()
    await ensure_streams(js)
    info = await js.stream_info(STREAM_CMD, subjects_filter=subject)
    await admin.close()
    return sum((info.state.subjects or {}).values())


async def test_a_team_users_oversized_message_is_refused_by_the_server(
    server: tuple[EmbeddedNats, AuthDir], tmp_path: Path
) -> None:
    embedded, auth = server
    subject = submit("nlp")
    before = await _stored(embedded.url, auth, subject)
    creds = auth.issue_team("nlp", "mallory", tmp_path / "nlp.creds")
    team = await Identity().connect(embedded.url, creds, team_inbox("nlp"))
    assert team.nc is not None
    await team.nc.publish(subject, b"x" * 1000)  # within the limit: stored
    await flushed(team.nc)
    assert team.errors == []
    await team.nc.publish(subject, b"x" * (512 * 1024))  # half the server's own maximum
    # The server refuses it and closes the connection; the flush meets the close or, by
    # timing, times out first, so what is awaited is the refusal and the close.
    with contextlib.suppress(ConnectionClosedError, nats.errors.FlushTimeoutError):
        await flushed(team.nc)
    for _ in range(50):
        if "maximum payload" in str(team.nc.last_error).lower() and not team.nc.is_connected:
            break
        await asyncio.sleep(0.1)
    assert "maximum payload" in str(team.nc.last_error).lower(), team.nc.last_error
    assert not team.nc.is_connected
    assert await _stored(embedded.url, auth, subject) == before + 1


async def test_a_team_user_may_hold_only_so_many_subscriptions(
    server: tuple[EmbeddedNats, AuthDir], tmp_path: Path
) -> None:
    embedded, auth = server
    creds = auth.issue_team("nlp", "mallory", tmp_path / "nlp-subs.creds",
                            limits=TeamLimits(payload=DEFAULT_TEAM_LIMITS.payload, subs=5))
    team = await Identity().connect(embedded.url, creds, team_inbox("nlp"))
    assert team.nc is not None
    for _ in range(8):
        await team.nc.subscribe(team_feed("nlp"))
    # The server answers the sixth with -ERR; whether it also closes the connection before
    # the flush returns depends on timing, so the refusal itself is what is awaited.
    with contextlib.suppress(ConnectionClosedError, nats.errors.FlushTimeoutError):
        await flushed(team.nc)
    for _ in range(50):
        if "maximum subscriptions" in str(team.nc.last_error).lower():
            break
        await asyncio.sleep(0.1)
    assert "maximum subscriptions" in str(team.nc.last_error).lower(), team.nc.last_error


def test_team_credentials_name_their_limits_and_services_have_none(tmp_path: Path) -> None:
    auth = AuthDir(tmp_path / "auth").ensure()
    creds = auth.issue_team("nlp", None, tmp_path / "nlp.creds")
    team = claims_of(read_creds(creds.read_text())[0])["nats"]
    assert (team["payload"], team["subs"], team["data"]) == (64 * 1024 + 4096, 100, -1)
    service = claims_of(read_creds(auth.creds_path("executor").read_text())[0])["nats"]
    assert (service["payload"], service["subs"], service["data"]) == (-1, -1, -1)
