"""A ledger killed at the worst moments (ROTA_FAULTS) loses no decision and makes none twice.

No ledger of another module is running here: each test starts one armed to die, then a clean
one on the same durable consumer and database that must finish the work exactly once. (A
crash after the relay published but before it marked the row is the shared outbox relay's
case, proven by the submission service's crash tests.)"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from nats.aio.client import Client
from rota.endpoints import Endpoints
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.harness import stream_last_seq
from tests.integration.ledger.conftest import decided, decisions, ledger_process, logged, publish, rows
from tests.unit.ledger.builders import proposal, run_ended

CRASH_EXIT_CODE = 86


@pytest.mark.parametrize(("fault", "gpu"), [
    # granted and committed; dies before the ack, so JetStream redelivers the proposal
    ("before_ack:ledger-proposals", 0),
    # committed, neither published nor acked: the survivor's relay publishes the grant, and
    # the redelivered proposal finds it made
    ("after_commit:ledger", 1),
])
async def test_a_crash_loses_no_grant_and_grants_once(
    fault: str, gpu: int, ledger_nc: Client, ledger_endpoints: Endpoints,
    ledger_engine: AsyncEngine, ledger_config_file: Path, tmp_path: Path,
) -> None:
    since = await stream_last_seq(ledger_nc)
    doomed = ledger_process(ledger_endpoints, ledger_config_file, tmp_path, name="doomed",
                            ROTA_FAULTS=fault).start()
    await doomed.wait_ready(ledger_nc)
    env = proposal([("h-3", [gpu])], datetime.now(UTC), team="vision", user="carol")
    await publish(ledger_nc, env)
    assert await doomed.wait_exit() == CRASH_EXIT_CODE, doomed.log()[-2000:]
    assert f"fault injected at {fault}" in doomed.log()
    assert len(await rows(ledger_engine, "allocations", run_id=env.data.run_id)) == 1

    survivor = ledger_process(ledger_endpoints, ledger_config_file, tmp_path, name="survivor").start()
    try:
        await survivor.wait_ready(ledger_nc)
        (granted,) = await decided(ledger_nc, since, env)
        assert granted["type"] == "AllocationGranted"
        await logged(survivor, f"proposal {env.data.proposal_id} decided already")
        assert len(await decisions(ledger_nc, since, {env.data.proposal_id})) == 1
        assert len(await rows(ledger_engine, "allocations", run_id=env.data.run_id)) == 1
        assert len(await rows(ledger_engine, "entries", run_id=env.data.run_id)) == 1
        # Give the GPU back, and let that finish before stopping: no test needs a ledger
        # that is terminated in the middle of a transaction.
        await publish(ledger_nc, run_ended("RunFinished", env, datetime.now(UTC)))
        await logged(survivor, f"GPUs of run {env.data.run_id}")
    finally:
        survivor.stop()
