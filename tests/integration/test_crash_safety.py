"""Crash safety with real processes killed at the worst moments (ROTA_FAULTS crash points).

No test here shares the submission consumer with another running service: each starts a
process armed to die, then a clean one that must finish the work exactly once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from nats.aio.client import Client
from rota.contracts import envelope
from rota.contracts import subjects as s
from rota.endpoints import Endpoints

from tests.builders import submit_job
from tests.integration.harness import (
    ACK_WAIT_S,
    ServiceProcess,
    events,
    eventually,
    publish_command,
    stream_last_seq,
)
from tests.integration.test_submission import job_rows

CRASH_EXIT_CODE = 86


async def _submitted_events(nc: Client, since: int, submission_id: str) -> list[dict[str, object]]:
    found = await events(nc, "rota.evt.job.submitted", since_seq=since)
    return [e for e in found if e["data"]["spec"]["submission_id"] == submission_id]  # type: ignore[index]


@pytest.mark.parametrize(
    "fault",
    [
        # the job row is committed, the consumer (team nlp's own durable) dies before its
        # ack: JetStream redelivers
        "before_ack:submission-team-nlp",
        # committed, but neither published nor acked: the relay must publish after restart
        "after_commit:submission",
        # published, but the outbox row is not marked: the relay re-sends the same Nats-Msg-Id
        "after_publish:submission",
    ],
)
async def test_a_crash_loses_nothing_and_duplicates_nothing(
    fault: str, nc: Client, endpoints: Endpoints, tmp_path: Path
) -> None:
    since = await stream_last_seq(nc)
    doomed = ServiceProcess("submission", endpoints, tmp_path, {"ROTA_FAULTS": fault}).start()
    await doomed.wait_ready(nc)
    spec = submit_job(name=f"crash-{fault.split(':')[0]}")
    command = envelope(spec, source="test")
    await publish_command(nc, s.submit("nlp"), command.to_bytes(), command.id)
    assert await doomed.wait_exit() == CRASH_EXIT_CODE, doomed.log()[-2000:]
    assert f"fault injected at {fault}" in doomed.log()
    assert len(await job_rows(endpoints, spec.submission_id)) == 1

    survivor = ServiceProcess("submission", endpoints, tmp_path).start()
    try:
        await survivor.wait_ready(nc)
        await eventually(lambda: _submitted_events(nc, since, spec.submission_id))
        if fault != "after_publish:submission":
            # The command was never acked, so it must come back, and find its job.
            await eventually(lambda: _saw_duplicate(survivor), timeout=20)
        await asyncio.sleep(2 * ACK_WAIT_S)  # room for any stray redelivery before counting
        rows = await job_rows(endpoints, spec.submission_id)
        published = await _submitted_events(nc, since, spec.submission_id)
        assert len(rows) == 1
        assert len(published) == 1
        assert published[0]["job_id"] == rows[0]["job_id"]
    finally:
        survivor.stop()


async def _saw_duplicate(service: ServiceProcess) -> bool:
    return "duplicate submission" in service.log()
