"""A ledger killed at the worst moments (ROTA_FAULTS) loses no decision and makes none twice.

No ledger of another module is running here: each test starts one armed to die, then a clean
one on the same durable consumer and database that must finish the work exactly once."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from nats.aio.client import Client
from rota.endpoints import Endpoints
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.harness import eventually, stream_last_seq
from tests.integration.ledger.conftest import ledger_process, rows
from tests.integration.ledger.test_ledger_service import decided, decisions, publish
from tests.unit.ledger.builders import proposal, run_ended

CRASH_EXIT_CODE = 86


@pytest.mark.parametrize(("fault", "gpu"), [
    # granted and committed; dies before the ack, so JetStream redelivers the proposal
    ("before_ack:ledger-proposals", 0),
    # committed, neither published nor acked: the survivor's relay publishes the grant
    ("after_commit:ledger", 1),
    # published, outbox row not marked: the relay re-sends it under the same Nats-Msg-Id
    ("after_publish:ledger", 2),
])
async def test_a_crash_loses_no_grant_and_grants_once(
    fault: str, gpu: int, nc: Client, endpoints: Endpoints, ledger_consumers: None,
    ledger_engine: AsyncEngine, ledger_config_file: Path, tmp_path: Path,
) -> None:
    since = await stream_last_seq(nc)
    doomed = ledger_process(endpoints, ledger_config_file, tmp_path, name="doomed",
                            ROTA_FAULTS=fault).start()
    await doomed.wait_ready(nc)
    env = proposal([("h-3", [gpu])], datetime.now(UTC), team="vision", user="carol")
    await publish(nc, env)
    assert await doomed.wait_exit() == CRASH_EXIT_CODE, doomed.log()[-2000:]
    assert f"fault injected at {fault}" in doomed.log()
    assert len(await rows(ledger_engine, "allocations", run_id=env.data.run_id)) == 1

    survivor = ledger_process(endpoints, ledger_config_file, tmp_path, name="survivor").start()
    try:
        await survivor.wait_ready(nc)
        (granted,) = await decided(nc, since, env)
        assert granted["type"] == "AllocationGranted"
        # The unacked proposal comes back, and finds its decision already made.
        await eventually(lambda: _log_has(survivor, f"proposal {env.data.proposal_id} decided already"))
        assert len(await decisions(nc, since, {env.data.proposal_id})) == 1
        assert len(await rows(ledger_engine, "allocations", run_id=env.data.run_id)) == 1
        assert len(await rows(ledger_engine, "entries", run_id=env.data.run_id)) == 1
    finally:
        await publish(nc, run_ended("RunFinished", env, datetime.now(UTC)))
        survivor.stop()


async def _log_has(service: object, text: str) -> bool:
    return text in service.log()  # type: ignore[attr-defined]
