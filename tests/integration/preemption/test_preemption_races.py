"""The locking rules of `store.py` against real PostgreSQL: a plan racing the end of its
victim's run, or the cancellation of its preemptor, never leaves a saga waiting forever.

The coordinator is driven in-process with concurrent handlers, as a pull batch is handled.
Its outbox rows are real and the running coordinator's relay publishes them; ids are fresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from rota.clock import SystemClock
from rota.config import parse_config
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.db import migrate
from rota.db.engine import make_engine
from rota.db.outbox import Outbox
from rota.endpoints import Endpoints
from rota_preemption import store
from rota_preemption.app import MIGRATIONS
from rota_preemption.coordinator import Coordinator
from rota_preemption.domain import PlanState
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.preemption.conftest import CONFIG
from tests.integration.preemption.helpers import Saga, Victim

ROUNDS = 20


@pytest.fixture(scope="module")
async def engine(endpoints: Endpoints) -> AsyncIterator[AsyncEngine]:
    await asyncio.to_thread(migrate.upgrade, endpoints.database_url, "preemption", MIGRATIONS)
    engine = make_engine(endpoints.database_url)
    yield engine
    await engine.dispose()


def coordinator(engine: AsyncEngine) -> Coordinator:
    return Coordinator(lambda: engine, Outbox("preemption"), parse_config(CONFIG), SystemClock(),
                       max_bytes=64 * 1024)


def raw(data: Any, job_id: str) -> bytes:
    return envelope(data, source="test", job_id=job_id).to_bytes()


async def state_of(engine: AsyncEngine, plan_id: str) -> PlanState:
    async with engine.begin() as conn:
        saga = await store.lock_saga(conn, plan_id)
    assert saga is not None
    return saga.plan.state


async def test_a_plan_racing_its_victims_run_end_still_completes(engine: AsyncEngine) -> None:
    c = coordinator(engine)
    for _ in range(ROUNDS):
        saga = Saga(None, None, Victim())  # type: ignore[arg-type]  # only its messages
        v = saga.victim
        await asyncio.gather(
            c.preemption_requested(raw(saga.request(), saga.preemptor_job_id)),
            c.run_event(raw(m.RunFinished(run_id=v.run_id, job_id=v.job_id), v.job_id)),
        )
        assert await state_of(engine, saga.plan_id) is PlanState.completed


async def test_a_plan_racing_its_preemptors_cancellation_is_aborted(engine: AsyncEngine) -> None:
    c = coordinator(engine)
    for _ in range(ROUNDS):
        saga = Saga(None, None, Victim())  # type: ignore[arg-type]
        cancelled = m.JobCancelled(job_id=saga.preemptor_job_id, team="ml", reason="gone")
        await asyncio.gather(
            c.preemption_requested(raw(saga.request(), saga.preemptor_job_id)),
            c.job_cancelled(raw(cancelled, saga.preemptor_job_id)),
        )
        assert await state_of(engine, saga.plan_id) is PlanState.aborted


async def test_one_plan_delivered_twice_at_once_opens_one_saga(engine: AsyncEngine) -> None:
    c = coordinator(engine)
    saga = Saga(None, None, Victim(), Victim())  # type: ignore[arg-type]
    await asyncio.gather(*(c.preemption_requested(raw(saga.request(), saga.preemptor_job_id))
                           for _ in range(4)))
    async with engine.begin() as conn:
        opened = await store.lock_saga(conn, saga.plan_id)
    assert opened is not None and len(opened.victims) == 2
