"""The AsyncAPI document, checked by a client against a real nats-server on Rota's generated
operator-mode config: with a team's and a run's real credentials, every channel the document
gives that identity is allowed by the server (publish where Rota receives, subscribe where
Rota sends), and a channel it does not give them is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from rota.auth.keys import AuthDir
from rota.embedded import EmbeddedNats

from tests.integration.security.test_permissions import _run, _team

DOCUMENT = Path(__file__).resolve().parents[3] / "contracts" / "asyncapi.yaml"
RUN = "01a00000-0000-7000-8000-00000000c003"


@pytest.fixture(scope="module")
def server(secure_nats: tuple[EmbeddedNats, AuthDir]) -> tuple[EmbeddedNats, AuthDir]:
    return secure_nats


def channels_of(identity: str, values: dict[str, str]) -> list[tuple[str, str]]:
    """(action, concrete subject) of every operation the document gives `identity`."""
    document: dict[str, Any] = yaml.safe_load(DOCUMENT.read_text())
    found = []
    for operation in document["operations"].values():
        refs = {r["$ref"].rsplit("/", 1)[-1] for r in operation.get("security", [])}
        if identity not in refs:
            continue
        channel_id = operation["channel"]["$ref"].removeprefix("#/channels/")
        address = document["channels"][channel_id.replace("%7B", "{").replace("%7D", "}")][
            "address"]
        for name, value in values.items():
            address = address.replace(f"{{{name}}}", value)
        found.append((operation["action"], address))
    return sorted(found)


async def test_every_channel_the_document_gives_a_team_the_server_allows(
    server: tuple[EmbeddedNats, AuthDir], tmp_path: Path
) -> None:
    team = await _team(server, tmp_path, "nlp")
    assert team.nc is not None
    given = channels_of("team", {"team": "nlp"})
    assert len(given) >= 10 + 14  # 10 subjects to publish, the feed's 14 types
    for action, subject in given:
        if action == "receive":
            await team.nc.publish(subject, b"{}")
            assert not await team.refused(subject), subject
        else:
            await team.nc.subscribe(subject)
            assert not await team.refused(subject, "subscription"), subject
    for outside in ("rota.api.job.get", "rota.evt.job.submitted"):
        await team.nc.publish(outside, b"{}")
        assert await team.refused(outside), outside
    await team.nc.subscribe("rota.feed.vision.>")  # another team's feed: no channel of its
    assert await team.refused("rota.feed.vision.>", "subscription")
    await team.nc.close()


async def test_every_channel_the_document_gives_a_run_the_server_allows(
    server: tuple[EmbeddedNats, AuthDir], tmp_path: Path
) -> None:
    run = await _run(server, tmp_path, RUN)
    assert run.nc is not None
    given = channels_of("run", {"run_id": RUN})
    assert ("receive", f"$JS.API.DIRECT.GET.ROTA_CTL.rota.ctl.run.{RUN}") in given
    for action, subject in given:
        if action == "receive":
            await run.nc.publish(subject, b"", reply=f"_INBOX_run_{RUN}.x")
            assert not await run.refused(subject), subject
        else:
            await run.nc.subscribe(subject)
            assert not await run.refused(subject, "subscription"), subject
    await run.nc.close()
