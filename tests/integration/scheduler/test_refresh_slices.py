"""A deep queue is asked about again a slice per cycle: no cycle, not even the first after a
restart, explains every pending job at once (a job that fits and arrives meanwhile would wait
for seconds), and a pass still reaches every one of them."""

from __future__ import annotations

import pytest
from nats.aio.client import Client
from rota.endpoints import Endpoints
from rota.ids import new_id
from rota_policy import Decisions, PolicyConfig, Snapshot
from rota_scheduler import cycle as scheduling
from rota_scheduler.staleness import WaitPrint

from tests.integration.scheduler.test_lease_during_cycle import _submitted, scheduler_on


async def test_a_deep_queue_is_refreshed_a_slice_per_cycle(
    endpoints: Endpoints, nc: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[frozenset[str] | None] = []

    def recording_schedule(snapshot: Snapshot, now: float, config: PolicyConfig) -> Decisions:
        asked.append(snapshot.explain)
        return Decisions()

    monkeypatch.setattr(scheduling, "schedule", recording_schedule)
    scheduler = scheduler_on(endpoints)
    waiting = [new_id() for _ in range(2 * scheduling.REFRESH_SLICE + 10)]
    for job_id in waiting:
        scheduler.intake.take(_submitted(nc, job_id))
        scheduler.view.explained(scheduler.view.jobs[job_id],
                                 WaitPrint(("PRIORITY",), 0, None, 1, False, ()))
    epoch = 1_000_000.0
    for cycle in range(3):
        scheduler.cycle.decide(epoch + 3600.0 * cycle)  # an hour apart: every slice is due
    assert all(a is not None and len(a) <= scheduling.REFRESH_SLICE for a in asked), \
        [None if a is None else len(a) for a in asked]
    covered = set().union(*(a for a in asked if a is not None))
    assert covered == set(waiting)
