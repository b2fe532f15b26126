"""The streams' bounds on a real nats-server of their own: a command far over the message cap
is refused at publish, not kept; a team's flood of commands evicts only its own oldest, never
another team's; commands are kept a day; and the events, which replays read from the first,
are never cut by age and, full, refuse new ones rather than forget old ones."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import DiscardPolicy
from nats.js.errors import APIError
from rota.bus.broker import HEADER_ROOM_BYTES, StreamLimits, ensure_streams
from rota.contracts.subjects import STREAM_CMD, STREAM_EVT, submit
from rota.embedded import EmbeddedNats

LIMITS = StreamLimits(max_message_bytes=8192, cmd_max_msgs_per_subject=50,
                      evt_max_bytes=1024**3)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    embedded = EmbeddedNats(Path(tmp_path_factory.mktemp("stream-limits")))
    embedded.start()
    yield embedded
    embedded.stop()


@pytest.fixture
async def nc(server: EmbeddedNats) -> AsyncIterator[Client]:
    client = await nats.connect(server.url)
    await ensure_streams(client.jetstream(), limits=LIMITS)
    yield client
    await client.close()


async def _kept(nc: Client, subject: str) -> int:
    info = await nc.jetstream().stream_info(STREAM_CMD, subjects_filter=subject)
    return sum((info.state.subjects or {}).values())


async def test_a_team_s_flood_evicts_only_its_own_commands(nc: Client) -> None:
    js = nc.jetstream()
    for _ in range(5):
        await js.publish(submit("patient"), b"{}", stream=STREAM_CMD)
    for i in range(80):
        await js.publish(submit("flooder"), b"%d" % i, stream=STREAM_CMD)
    assert await _kept(nc, submit("patient")) == 5
    assert await _kept(nc, submit("flooder")) == 50
    newest = await js.get_last_msg(STREAM_CMD, submit("flooder"))
    assert newest.data == b"79"


async def test_a_command_far_over_the_message_cap_is_refused_at_publish(nc: Client) -> None:
    js = nc.jetstream()
    within_room = b"x" * (LIMITS.max_message_bytes + 100)  # answered PAYLOAD_TOO_LARGE
    await js.publish(submit("someone"), within_room, stream=STREAM_CMD)
    with pytest.raises(APIError):
        await js.publish(submit("someone"), b"x" * (LIMITS.max_message_bytes
                                                    + HEADER_ROOM_BYTES + 1), stream=STREAM_CMD)
    assert await _kept(nc, submit("someone")) == 1


async def test_commands_are_kept_a_day_and_events_by_size_alone(nc: Client) -> None:
    js = nc.jetstream()
    commands = (await js.stream_info(STREAM_CMD)).config
    assert commands.max_age == 86_400.0 and commands.discard == DiscardPolicy.OLD
    events = (await js.stream_info(STREAM_EVT)).config
    assert not events.max_age
    assert (events.max_bytes, events.discard) == (1024**3, DiscardPolicy.NEW)
    assert events.max_msg_size == LIMITS.max_message_bytes + HEADER_ROOM_BYTES
