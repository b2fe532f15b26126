"""One team cannot starve the others, on a real submission service, NATS and PostgreSQL: a
team's waiting jobs and its submit rate are bounded (the job past either is refused naming
the rule and the limit), and a team's backlog of commands does not hold up another team's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
import rota.config as config_package
import yaml
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy
from rota.config.loader import EXAMPLE_NAME
from rota.contracts import envelope
from rota.contracts import subjects as s
from rota.contracts.subjects import STREAM_CMD
from rota.endpoints import Endpoints

from tests.builders import submit_job
from tests.integration.harness import ServiceProcess, api, eventually, stream_last_seq

FLOOD = 1500


def config_doc() -> dict[str, Any]:
    """The example with teams of this module's own added, so that no other module's jobs
    count against their limits: `capped` may have 2 jobs waiting, `trickle` may submit 2 at
    once and then hardly any more, `flooder` and `patient` have room for the flood."""
    doc: dict[str, Any] = yaml.safe_load(
        (Path(config_package.__file__).parent / EXAMPLE_NAME).read_text())
    team: dict[str, Any] = {}  # no quota of their own: their jobs wait, as a flood's would
    doc["teams"] |= {
        "capped": {**team, "intake": {"max_pending": 2}},
        "trickle": {**team, "intake": {"submit_burst": 2, "submit_rate_per_s": 0.0001}},
        "flooder": team, "patient": team,
    }
    doc["intake"] = {"max_pending": 100_000, "submit_rate_per_s": 100_000,
                     "submit_burst": 100_000}
    return doc


@pytest.fixture(scope="module")
def intake_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("intake") / "rota.yaml"
    path.write_text(yaml.safe_dump(config_doc()))
    return path


def intake_service(endpoints: Endpoints, config: Path) -> ServiceProcess:
    return ServiceProcess("submission", endpoints, config.parent / "logs",
                          {"ROTA_CONFIG": str(config)})


@pytest.fixture(scope="module")
async def limited(endpoints: Endpoints, nc: Client, intake_config: Path
                  ) -> AsyncIterator[ServiceProcess]:
    async with intake_service(endpoints, intake_config).serving(nc) as service:
        yield service


async def test_the_job_past_a_team_s_pending_limit_is_refused_with_the_rule(
    nc: Client, limited: ServiceProcess
) -> None:
    first, second = (submit_job(team="capped", user="u", name=f"j{i}") for i in range(2))
    for spec in (first, second):
        assert (await api(nc, s.api_submit("capped"), spec)).ok
    third = await api(nc, s.api_submit("capped"), submit_job(team="capped", user="u"))
    assert third.error is not None
    assert (third.error.code, third.error.field) == ("PENDING_LIMIT", "team")
    assert "intake.max_pending: 2" in third.error.message
    # Resubmitting a job already recorded adds nothing: it is answered, not refused.
    again = await api(nc, s.api_submit("capped"), first)
    assert again.ok and again.result["duplicate"] is True


async def test_past_a_team_s_burst_a_submission_is_refused_as_rate_limited(
    nc: Client, limited: ServiceProcess
) -> None:
    replies = [await api(nc, s.api_submit("trickle"), submit_job(team="trickle", user="u"))
               for _ in range(3)]
    assert [r.ok for r in replies] == [True, True, False]
    error = replies[2].error
    assert error is not None and (error.code, error.field) == ("RATE_LIMITED", "team")
    assert "intake.submit_rate_per_s" in error.message and "at most 2 at once" in error.message


async def _submitted_sequences(nc: Client, since: int) -> list[tuple[int, str]]:
    """(stream sequence, team) of every JobSubmitted after `since`."""
    sub = await nc.jetstream().pull_subscribe(
        s.EVENT_SUBJECTS["JobSubmitted"], stream=s.STREAM_EVT, config=ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=since + 1))
    found: list[tuple[int, str]] = []
    try:
        while True:
            try:
                batch = await sub.fetch(1000, timeout=0.5)
            except (TimeoutError, nats.errors.TimeoutError):
                return found
            for msg in batch:
                found.append((msg.metadata.sequence.stream,
                              json.loads(msg.data)["data"]["spec"]["team"]))
                await msg.ack()
    finally:
        await sub.unsubscribe()


async def test_a_team_s_backlog_does_not_hold_up_another_team_s_submission(
    nc: Client, endpoints: Endpoints, intake_config: Path, limited: ServiceProcess
) -> None:
    """`flooder`'s commands wait in the stream, then one of `patient`'s; when the service
    reads them, `patient`'s job is recorded long before `flooder`'s backlog is drained.
    Read in one line for every team, it would be recorded after all of them."""
    limited.stop()
    since = await stream_last_seq(nc)
    js = nc.jetstream()
    acks = []
    for i in range(FLOOD):
        env = envelope(submit_job(team="flooder", user="u", name=f"flood-{i}"), source="test")
        acks.append(js.publish(s.submit("flooder"), env.to_bytes(), stream=STREAM_CMD,
                               headers={"Nats-Msg-Id": env.id}))
    await asyncio.gather(*acks)
    env = envelope(submit_job(team="patient", user="u", name="patient"), source="test")
    await js.publish(s.submit("patient"), env.to_bytes(), stream=STREAM_CMD,
                     headers={"Nats-Msg-Id": env.id})
    async with intake_service(endpoints, intake_config).serving(nc):
        async def all_recorded() -> list[tuple[int, str]] | None:
            found = await _submitted_sequences(nc, since)
            return found if len(found) >= FLOOD + 1 else None

        recorded = await eventually(all_recorded, timeout=120, interval=1.0)
    [patient_seq] = [seq for seq, team in recorded if team == "patient"]
    flood_before = sum(1 for seq, team in recorded if team == "flooder" and seq < patient_seq)
    assert flood_before < FLOOD // 2, (
        f"{flood_before} of {FLOOD} flooder jobs were recorded before patient's one")
