"""The live feed relay: each page gets only the events of teams its viewer may see."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from rota_console.feed import Relay, parse
from rota_console.reader import PLATFORM, Viewer


@dataclass
class Msg:
    subject: str
    data: bytes


def event(team: str, kind: str = "RunStarted") -> Any:
    return Msg(f"rota.feed.{team}.run.started",
               json.dumps({"type": kind, "job_id": f"job-{team}", "data": {"secret": "x"}}).encode())


def test_parse_reads_the_team_from_the_subject_and_drops_what_is_not_a_feed() -> None:
    parsed = parse(event("nlp"))  # type: ignore[arg-type]
    assert parsed is not None and (parsed.team, parsed.job_id) == ("nlp", "job-nlp")
    assert parse(Msg("rota.evt.run.started", b"{}")) is None  # type: ignore[arg-type]
    assert parse(Msg("rota.feed.nlp.run.started", b"not json")) is None  # type: ignore[arg-type]


async def test_a_page_hears_its_own_team_only_and_never_the_events_data() -> None:
    relay = Relay()
    nlp, platform = relay.stream(Viewer("nlp")), relay.stream(Viewer(PLATFORM))
    assert await anext(nlp) == ": connected\n\n"
    assert await anext(platform) == ": connected\n\n"
    await relay.on_message(event("vision"))  # type: ignore[arg-type]
    await relay.on_message(event("nlp"))  # type: ignore[arg-type]
    line = await asyncio.wait_for(anext(nlp), 1)
    assert '"job_id": "job-nlp"' in line and "secret" not in line
    assert "job-vision" in await asyncio.wait_for(anext(platform), 1)
    assert "job-nlp" in await asyncio.wait_for(anext(platform), 1)
    await nlp.aclose()
    await platform.aclose()
    assert relay.listeners == set()
