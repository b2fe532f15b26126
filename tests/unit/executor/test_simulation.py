"""The simulator's model of a run: progress on a sped-up clock, checkpoints, notice, end."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from rota_executor.domain import sim_progress, sim_uri
from rota_executor.simulation import Acknowledged, Checkpointed, Ended, SimPlan

from tests.unit.executor.runs import T0, record


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def plan(speed: float = 10.0, **kwargs: object) -> SimPlan:
    sim = {"duration_s": 1000, "checkpoint_interval_s": 100, "checkpoint_save_s": 50}
    sim.update(kwargs.pop("sim", {}))  # type: ignore[call-overload]
    return SimPlan.of(record(sim=sim, **kwargs), speed)  # type: ignore[arg-type]


def test_progress_runs_at_the_sim_speed() -> None:
    p = plan(speed=10)
    assert p.progress(at(0)) == 0
    assert p.progress(at(25)) == 250


def test_only_the_latest_checkpoint_is_due_and_each_once() -> None:
    p = plan(speed=10)
    assert p.due(at(5)) == []
    [c] = p.due(at(35))  # progress 350: checkpoints 100, 200, 300 passed; 300 supersedes
    assert c == Checkpointed(300, at(30))
    p = p.after(c)
    assert p.due(at(39)) == []
    assert p.due(at(40)) == [Checkpointed(400, at(40))]


def test_the_run_finishes_at_its_duration_without_a_checkpoint_at_the_end() -> None:
    p = plan(speed=10).after(Checkpointed(900, at(90)))
    assert p.due(at(99)) == []
    assert p.due(at(150)) == [Ended(True, 1000, at(100))]


def test_fail_after_is_counted_in_the_runs_own_time() -> None:
    p = plan(speed=10, sim={"fail_after_s": 250}, resume_from=None)
    assert p.due(at(30)) == [Checkpointed(200, at(20)), Ended(False, 250, at(25))]


def test_a_resumed_run_continues_from_its_checkpoint() -> None:
    job = "0190aaaa-0000-7000-8000-000000000001"
    p = plan(speed=10, job_id=job, resume_from=sim_uri(job, 650))
    assert p.p0 == 650 and p.progress(at(10)) == 750
    assert p.due(at(12)) == [Checkpointed(750, at(10))]
    assert p.after(Checkpointed(950, at(30))).due(at(40)) == [Ended(True, 1000, at(35))]


def test_a_checkpoint_of_another_job_is_not_resumed() -> None:
    assert sim_progress("sim://someone-else/500", "mine") == 0
    assert sim_progress("s3://bucket/ckpt", "mine") == 0
    assert sim_progress(sim_uri("mine", 1234.5), "mine") == 1234.5


def test_a_notice_is_acknowledged_after_the_save_then_the_run_waits_for_its_stop() -> None:
    notice = "0190aaaa-0000-7000-8000-0000000000aa"
    p = SimPlan.of(record(sim={"duration_s": 1000, "checkpoint_interval_s": 100,
                               "checkpoint_save_s": 50}, notice_id=notice, notice_at=at(12)), 10)
    assert p.due(at(16)) == [Checkpointed(100, at(10))]  # saving takes 50 s / 10 = 5 s
    actions = p.due(at(18))
    assert actions == [Checkpointed(100, at(10)), Acknowledged(170, at(17), notice)]
    for action in actions:
        p = p.after(action)
    assert p.due(at(500)) == []  # saved and waiting: no finish, no more checkpoints
    assert p.progress(at(500)) == 170


def test_a_withdrawn_notice_cancels_the_pending_save() -> None:
    notice = "0190aaaa-0000-7000-8000-0000000000bb"
    p = SimPlan.of(record(sim={"duration_s": 1000, "checkpoint_save_s": 50},
                          notice_id=notice, notice_at=at(1)), 10)
    withdrawn = p.with_notice(record(sim=None, notice_id=None, notice_at=None))
    assert [a for a in withdrawn.due(at(9)) if isinstance(a, Acknowledged)] == []
    assert [a for a in p.due(at(9)) if isinstance(a, Acknowledged)] != []


def test_a_run_that_ends_before_its_save_finishes_simply_ends() -> None:
    notice = "0190aaaa-0000-7000-8000-0000000000cc"
    p = SimPlan.of(record(sim={"duration_s": 100, "checkpoint_save_s": 500},
                          notice_id=notice, notice_at=at(5)), 10)
    assert p.due(at(60)) == [Ended(True, 100, at(10))]


def test_non_resumable_runs_make_no_checkpoints() -> None:
    p = SimPlan.of(record(sim={"duration_s": 1000}, resumable=False), 10)
    assert p.due(at(50)) == []


@pytest.mark.parametrize(("progress", "text"), [(0, "0"), (600, "600"), (612.5, "612.5"),
                                                (1_000_000, "1000000")])
def test_sim_uris_are_fixed_point(progress: float, text: str) -> None:
    assert sim_uri("job", progress) == f"sim://job/{text}"


@pytest.mark.parametrize("p", [
    plan(speed=10),
    plan(speed=10).after(Checkpointed(300, at(30))),
    plan(speed=7, sim={"fail_after_s": 250}),
    plan(speed=3, resume_from=sim_uri("job-r", 150), job_id="job-r"),
    plan(speed=10, sim={"checkpoint_interval_s": None}, resumable=False),
    plan(speed=10, notice_id="0190aaaa-0000-7000-8000-0000000000dd", notice_at=at(12)),
], ids=["fresh", "after-a-checkpoint", "failing", "resumed", "no-checkpoints", "noticed"])
def test_nothing_is_due_before_next_due_and_something_is_just_after(p: SimPlan) -> None:
    next_due = p.next_due()
    assert next_due is not None
    t = T0
    while t < next_due:
        assert p.due(t) == [], t
        t += timedelta(milliseconds=250)
    assert p.due(next_due + timedelta(milliseconds=2)) != []


def test_a_run_that_saved_for_its_notice_is_never_due_again() -> None:
    p = plan(speed=10, notice_id="0190aaaa-0000-7000-8000-0000000000ee", notice_at=at(1))
    [*_, ack] = p.due(at(20))
    assert isinstance(ack, Acknowledged)
    assert p.after(ack).next_due() is None
