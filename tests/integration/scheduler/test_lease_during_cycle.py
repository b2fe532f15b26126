"""A leader never loses its lease because its policy is busy.

The policy is pure CPU work and a cycle at 50,000 pending jobs takes seconds; the lease is
renewed on the event loop every third of its TTL. Here the policy blocks the thread it runs
on until the lease has been renewed three times (or, if renewal cannot run meanwhile, for
many TTLs): the cycle must leave the loop free to renew.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from rota.config import load_config
from rota.contracts import JobSpec, envelope
from rota.contracts import messages as m
from rota.contracts.subjects import EVENT_SUBJECTS
from rota.endpoints import Endpoints
from rota.ids import new_id
from rota.service import RotaService
from rota.settings import Settings
from rota_policy import Decisions, PolicyConfig, Snapshot, policy_config_from
from rota_scheduler import app, intake
from rota_scheduler import cycle as scheduling
from rota_scheduler.lease import Lease

from tests.builders import spec_doc
from tests.integration.harness import eventually

TTL_S = 1.0
RENEWALS = 3


def _submitted(nc: Client, job_id: str) -> Msg:
    """A JobSubmitted as the scheduler's ordered consumer delivers it (stream sequence 1)."""
    spec = JobSpec.model_validate(spec_doc())
    env = envelope(m.JobSubmitted(job_id=job_id, spec=spec, submitted_at=datetime.now(UTC)),
                   source="submission", job_id=job_id)  # fmt: skip
    return Msg(nc, subject=EVENT_SUBJECTS["JobSubmitted"], reply="$JS.ACK.ROTA_EVT.view.1.1.1.0.0",
               data=env.to_bytes())  # fmt: skip


def scheduler_on(endpoints: Endpoints) -> app.Scheduler:
    """A scheduler that is not started: its cycle's parts are called directly."""
    config = load_config()
    service = RotaService("scheduler", migrations=None, settings=Settings(),
                          endpoints=endpoints)  # fmt: skip
    return app.scheduler_of(service, config, policy_config_from(config))


async def test_the_lease_is_renewed_while_a_long_cycle_decides(
    endpoints: Endpoints, nc: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    js = nc.jetstream()
    bucket = f"lease_test_{new_id()[-12:]}"
    lease = Lease(js, "busy-leader", TTL_S, bucket=bucket)
    assert await lease.try_acquire()
    lost = asyncio.Event()
    keeper = asyncio.create_task(lease.keep(lost))
    release = threading.Event()
    renewed_while_deciding: list[int] = []

    def slow_schedule(snapshot: Snapshot, now: float, config: PolicyConfig) -> Decisions:
        before = lease.renewals
        release.wait(timeout=10 * TTL_S)  # blocks whatever thread the policy runs on
        renewed_while_deciding.append(lease.renewals - before)
        return Decisions()

    monkeypatch.setattr(scheduling, "schedule", slow_schedule)
    scheduler = scheduler_on(endpoints)
    job_id = new_id()

    async def release_after_renewals() -> None:
        before = lease.renewals

        async def renewed() -> bool:
            return lease.renewals >= before + RENEWALS

        await eventually(renewed, timeout=30 * TTL_S, interval=0.05)
        # An event that arrives mid-cycle waits: the view holds still under the policy.
        await scheduler.intake.on_event(_submitted(nc, job_id))
        assert job_id not in scheduler.view.jobs
        release.set()

    releaser = asyncio.create_task(release_after_renewals())
    try:
        await scheduler.cycle.run()
        assert renewed_while_deciding and renewed_while_deciding[0] >= RENEWALS
        assert not lost.is_set()
        assert await lease.renew(), "the lease was lost during the cycle"
        await releaser
        assert job_id in scheduler.view.jobs  # folded in once the cycle had decided
    finally:
        release.set()
        releaser.cancel()
        keeper.cancel()
        await asyncio.gather(releaser, keeper, return_exceptions=True)
        await lease.release()
        await js.delete_key_value(bucket)


async def test_a_long_backlog_of_held_events_is_folded_in_order_with_turns_for_the_loop(
    endpoints: Endpoints, nc: Client
) -> None:
    scheduler = scheduler_on(endpoints)
    backlog = [new_id() for _ in range(3 * intake.SLICE)]
    scheduler.intake._held = [_submitted(nc, job_id) for job_id in backlog]  # held while deciding
    turns = 0
    late = new_id()

    async def meanwhile() -> None:
        nonlocal turns
        await asyncio.sleep(0)
        await scheduler.intake.on_event(_submitted(nc, late))  # arrives while the backlog is folded
        while True:
            turns += 1
            await asyncio.sleep(0)

    other = asyncio.create_task(meanwhile())
    await asyncio.sleep(0)
    try:
        await scheduler.intake.fold_held()
    finally:
        other.cancel()
        await asyncio.gather(other, return_exceptions=True)
    assert turns >= 2, "the loop had no turn while the backlog was folded"
    assert list(scheduler.view.jobs) == [*backlog, late]  # in the stream's order
    assert not scheduler.intake.holding
