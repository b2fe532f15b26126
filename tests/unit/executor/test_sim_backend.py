"""The sim backend on a fake clock: what it reports as the clock moves, without NATS or a DB."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

import pytest
from rota.clock import FakeClock
from rota_executor.backend import Checkpoint, Exit, RunRecord, WorkerProcess
from rota_executor.sim import SimBackend
from rota_executor.simulation import Action, SimPlan

from tests.unit.executor.runs import T0, record


@dataclass
class Recorder:
    checkpoints: list[Checkpoint] = field(default_factory=list)
    ends: list[tuple[str, Exit]] = field(default_factory=list)

    async def launched(self, run_id: str, processes: list[WorkerProcess]) -> None:
        pass

    async def checkpointed(self, run: RunRecord, checkpoint: Checkpoint) -> None:
        self.checkpoints.append(checkpoint)

    async def ended(self, run_id: str, exit: Exit) -> None:
        self.ends.append((run_id, exit))


async def test_checkpoints_then_finish_as_the_clock_moves() -> None:
    clock, reporter = FakeClock(T0), Recorder()
    backend = SimBackend(reporter, clock, speed=60, tick_s=0.1)
    run = record(sim={"duration_s": 600, "checkpoint_interval_s": 120})
    await backend.start(run)
    clock.advance(2.5)  # 150 simulated seconds
    await backend.tick()
    assert [c.uri for c in reporter.checkpoints] == [f"sim://{run.job_id}/120"]
    assert reporter.checkpoints[0].notice_id is None
    clock.advance(60)
    await backend.tick()
    assert [c.uri for c in reporter.checkpoints][-1] == f"sim://{run.job_id}/480"
    assert reporter.ends == [(run.run_id, Exit(0, "simulated run finished at 600 s"))]
    assert backend.plans == {}


async def test_a_notice_is_saved_and_acknowledged_then_the_stop_ends_the_run() -> None:
    clock, reporter = FakeClock(T0), Recorder()
    backend = SimBackend(reporter, clock, speed=60, tick_s=0.1)
    run = record(sim={"duration_s": 6000, "checkpoint_save_s": 30})
    await backend.start(run)
    clock.advance(1)
    notice = "0190aaaa-0000-7000-8000-0000000000aa"
    backend.noticed(replace(run, notice_id=notice, notice_at=clock.now()))
    await backend.tick()
    assert reporter.checkpoints == []  # still saving: 30 s / 60 = 0.5 s of wall time
    clock.advance(0.5)
    await backend.tick()
    [ack] = reporter.checkpoints
    assert (ack.uri, ack.notice_id) == (f"sim://{run.job_id}/90", notice)
    await backend.stop(replace(run, state="stopping"))
    assert reporter.ends == [(run.run_id, Exit(None, "simulation stopped at progress 90 s"))]


async def test_a_notice_that_arrives_while_a_checkpoint_is_being_reported_is_not_lost() -> None:
    # The notice lands while the tick awaits the report of a periodic checkpoint, as it did in
    # a demo run: the tick then stored the plan it held, without the notice, and no ack came.
    clock = FakeClock(T0)
    notice = "0190aaaa-0000-7000-8000-0000000000bb"
    run = record(sim={"duration_s": 6000, "checkpoint_interval_s": 60, "checkpoint_save_s": 30})

    class NoticedDuringReport(Recorder):
        async def checkpointed(self, run_: RunRecord, checkpoint: Checkpoint) -> None:
            if checkpoint.notice_id is None and not self.checkpoints:
                backend.noticed(replace(run, notice_id=notice, notice_at=clock.now()))
            await super().checkpointed(run_, checkpoint)

    reporter = NoticedDuringReport()
    backend = SimBackend(reporter, clock, speed=60, tick_s=0.1)
    await backend.start(run)
    clock.advance(1.5)  # 90 simulated seconds: the periodic checkpoint at 60 s is due
    await backend.tick()
    assert [c.notice_id for c in reporter.checkpoints] == [None]
    clock.advance(0.5)  # the 30 s save is done (the periodic one at 120 s comes first)
    await backend.tick()
    assert [c.notice_id for c in reporter.checkpoints][-1] == notice


async def test_a_tick_asks_only_the_runs_with_something_due(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, reporter = FakeClock(T0), Recorder()
    backend = SimBackend(reporter, clock, speed=60, tick_s=0.1)
    short, long = record(sim={"duration_s": 600}), record(sim={"duration_s": 60_000})
    await backend.start(short)
    await backend.start(long)
    asked: list[str] = []
    due = SimPlan.due

    def counting(plan: SimPlan, now: datetime) -> list[Action]:
        asked.append(plan.run.run_id)
        return due(plan, now)

    monkeypatch.setattr(SimPlan, "due", counting)
    await backend.tick()  # new runs are asked once
    assert sorted(asked) == sorted([short.run_id, long.run_id])
    asked.clear()
    for _ in range(5):
        clock.advance(1)
        await backend.tick()
    assert asked == []  # 300 simulated seconds: nothing due for either
    clock.advance(6)
    await backend.tick()
    assert asked == [short.run_id]
    assert reporter.ends == [(short.run_id, Exit(0, "simulated run finished at 600 s"))]
    backend.noticed(replace(long, notice_id="0190aaaa-0000-7000-8000-0000000000ff",
                            notice_at=clock.now()))
    asked.clear()
    await backend.tick()  # a notice changes what is due: asked at once
    assert asked == [long.run_id]
