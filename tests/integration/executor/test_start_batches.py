"""The executor recording a pull batch of StartRuns in one transaction, in process, against
real PostgreSQL: each run once, its event with it, a bad command rejected without holding
up the rest, and nothing of a batch written unless all of it is.

A database of its own: an executor process of another module would publish this module's
outbox rows and adopt its runs."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from rota.clock import FakeClock
from rota.config import load_config
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts.job import JobSpec, WorkerPlacement
from rota.db import migrate
from rota.db.engine import async_url, make_engine
from rota.endpoints import Endpoints
from rota.ids import new_id
from rota.service import RotaService
from rota.settings import Settings
from rota_executor import store
from rota_executor.app import MIGRATIONS
from rota_executor.backend import RunRecord
from rota_executor.runs import Executor
from rota_executor.sim import SimBackend
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from tests.builders import spec_doc
from tests.unit.executor.runs import T0


async def _admin(url: str, statement: str) -> None:
    engine = create_async_engine(async_url(url), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(sa.text(statement))
    finally:
        await engine.dispose()


@pytest.fixture(scope="module")
async def database_url(endpoints: Endpoints) -> AsyncIterator[str]:
    name = f"rota_exec_batch_{uuid.uuid4().hex[:10]}"
    await _admin(endpoints.database_url, f'CREATE DATABASE "{name}"')
    url = make_url(async_url(endpoints.database_url)).set(database=name)
    rendered = url.render_as_string(hide_password=False)
    await asyncio.to_thread(migrate.upgrade, rendered, "executor", MIGRATIONS)
    yield rendered
    await _admin(endpoints.database_url, f'DROP DATABASE "{name}" WITH (FORCE)')


class Launches(SimBackend):
    """The sim backend, listing what it was asked to start; the runs in `refuse` it will not."""

    def __init__(self, executor: Executor) -> None:
        super().__init__(executor, executor.service.clock, speed=100.0, tick_s=1.0)
        self.started: list[str] = []
        self.refuse: set[str] = set()

    async def start(self, run: RunRecord, run_token: str = "") -> None:
        if run.run_id in self.refuse:
            raise RuntimeError("no room on the simulated node")
        self.started.append(run.run_id)
        await super().start(run, run_token)


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = make_engine(database_url)
    yield engine
    await engine.dispose()


@pytest.fixture
def executor(engine: AsyncEngine, endpoints: Endpoints) -> Executor:
    service = RotaService("executor", migrations=None, settings=Settings(),
                          clock=FakeClock(T0), endpoints=endpoints)
    service._engine = engine  # in process, without NATS: the relay is not needed here
    executor = Executor(service, load_config().expanded_nodes())
    executor.backend = Launches(executor)
    return executor


def start_run(node: str = "h100-0", run_id: str | None = None) -> m.StartRun:
    return m.StartRun(
        run_id=run_id or new_id(), job_id=new_id(), attempt=1,
        spec=JobSpec.model_validate(spec_doc(gpus_per_worker=2, sim={"duration_s": 100})),
        placement=[WorkerPlacement(worker=0, node=node, gpus=[0, 1])],
    )


def command(start: m.StartRun) -> tuple[bytes, None]:
    """A fresh envelope each time: a copy JetStream's de-duplication would not catch."""
    return envelope(start, source="scheduler", job_id=start.job_id,
                    run_id=start.run_id).to_bytes(), None


def launches(executor: Executor) -> list[str]:
    assert isinstance(executor.backend, Launches)
    return executor.backend.started


async def runs(engine: AsyncEngine) -> dict[str, Any]:
    async with engine.connect() as conn:
        return {row.run_id: row for row in await conn.execute(sa.select(store.runs))}


async def events(engine: AsyncEngine, executor: Executor, *starts: m.StartRun
                 ) -> list[tuple[str, str]]:
    """(type, run_id) of each event queued for these runs, in the outbox's order."""
    table = executor.service.outbox.table
    async with engine.connect() as conn:
        rows = await conn.execute(sa.select(table.c.payload).order_by(table.c.seq))
        docs = [json.loads(bytes(r.payload)) for r in rows]
    run_ids = {s.run_id for s in starts}
    return [(d["type"], d["run_id"]) for d in docs if d["run_id"] in run_ids]


async def test_a_batch_starts_each_run_once_and_fails_the_one_that_cannot_run(
        executor: Executor, engine: AsyncEngine) -> None:
    first, second = start_run(), start_run()
    earlier = start_run()
    await executor.start_batch([command(earlier)])
    elsewhere = start_run(node="h100-99")
    batch = [command(first), command(first), command(elsewhere), (b"not json", None),
             command(earlier), command(second)]
    await executor.start_batch(batch)

    assert launches(executor) == [earlier.run_id, first.run_id, second.run_id]
    recorded = await runs(engine)
    assert {run_id: row.state for run_id, row in recorded.items()} == {
        earlier.run_id: "running", first.run_id: "running", second.run_id: "running",
        elsewhere.run_id: "failed"}
    assert "no node 'h100-99'" in recorded[elsewhere.run_id].detail
    everything = (earlier, first, elsewhere, second)
    assert await events(engine, executor, *everything) == [
        ("RunStarted", earlier.run_id), ("RunStarted", first.run_id),
        ("RunFailed", elsewhere.run_id), ("RunStarted", second.run_id)]

    # The whole batch redelivered (its ack lost): nothing starts or is published again.
    await executor.start_batch(batch)
    assert launches(executor) == [earlier.run_id, first.run_id, second.run_id]
    assert len(await events(engine, executor, *everything)) == 4


async def test_a_batch_that_fails_to_commit_writes_nothing_and_its_retry_starts_each_once(
        executor: Executor, engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    before = len(await runs(engine))
    batch = [start_run() for _ in range(3)]

    async def broken(conn: Any, rows: list[dict[str, Any]]) -> None:
        raise RuntimeError("the outbox insert failed")

    with monkeypatch.context() as patched:
        patched.setattr(executor.service.outbox, "add_rows", broken)
        with pytest.raises(RuntimeError):
            await executor.start_batch([command(s) for s in batch])
    assert len(await runs(engine)) == before  # no run without its RunStarted
    assert launches(executor) == []

    for start in batch:  # as the batch consumer retries a failed batch: one at a time
        await executor.start_batch([command(start)])
    assert launches(executor) == [s.run_id for s in batch]
    assert await events(engine, executor, *batch) == [("RunStarted", s.run_id) for s in batch]


async def test_a_run_the_backend_cannot_start_ends_failed_and_the_rest_still_launch(
        executor: Executor, engine: AsyncEngine) -> None:
    refused, fine = start_run(), start_run()
    assert isinstance(executor.backend, Launches)
    executor.backend.refuse.add(refused.run_id)
    await executor.start_batch([command(refused), command(fine)])
    assert launches(executor) == [fine.run_id]
    recorded = await runs(engine)
    assert recorded[refused.run_id].state == "failed"
    assert "cannot start: no room" in recorded[refused.run_id].detail
    assert recorded[fine.run_id].state == "running"
    assert await events(engine, executor, refused, fine) == [("RunStarted", refused.run_id), ("RunStarted", fine.run_id),
                      ("RunFailed", refused.run_id)]
