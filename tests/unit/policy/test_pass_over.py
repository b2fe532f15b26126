"""Passing over jobs that a reservation blocks changes no decision.

With no preemption attempt and no reservation left to give in a cycle, a blocked job has no
effect but counting against its queue's depth; the walk then skips, in one step, the jobs right
behind it that a reservation also blocks. The reference walk (`pass_over=False`) tries each one.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rota.contracts.messages import WaitReasonCode as Code
from rota_policy import Decisions, PendingJob, PolicyConfig, Snapshot
from rota_policy.admission.backfill import ReservationBook
from rota_policy.baselines.slurm import SLURM_RULES
from rota_policy.core import ROTA_RULES
from rota_policy.cycle.engine import Cycle, Rules, run_cycle
from rota_policy.cycle.fast.shortcuts import all_blocked, behind

from tests.unit.policy.builders import World, gpu_jobs, team_config

NOW = 50_000.0
TEAMS = ("a", "b", "c")


def _decided(d: Decisions) -> tuple[object, ...]:
    return (d.admissions, d.plans, d.abandoned_plans, d.deferred)


def _both(snap: Snapshot, config: PolicyConfig, rules: Rules) -> tuple[Decisions, Decisions]:
    return run_cycle(snap, NOW, config, rules), run_cycle(snap, NOW, config, replace(rules, pass_over=False))


@st.composite
def behind_a_reservation(draw: st.DrawFn) -> tuple[Snapshot, PolicyConfig]:
    """Half the GPUs busy until different times, a big head job, many jobs of mixed size and
    length behind it: some backfill, most wait on the head's reservation."""
    world = World(nodes=4, racks=2, usage={"b": 1e12, "c": 1e12})  # a's head comes first
    for node in range(4):
        busy = draw(st.sampled_from((0, 4, 8)))
        if busy:
            world.run(
                "a", "training", node=node,
                gpus=busy, started=NOW - draw(st.integers(0, 4000)), end=NOW + draw(st.integers(0, 20_000)),
                resumable=draw(st.booleans()),
            )  # fmt: skip
    pending = gpu_jobs("a", "training", gpus=8, workers=4, runtime=3600.0, name="head")
    for i in range(draw(st.integers(5, 120))):
        pending += gpu_jobs(
            draw(st.sampled_from(TEAMS)), draw(st.sampled_from(("training", "experiment"))),
            gpus=draw(st.sampled_from((1, 1, 2, 3, 4, 8))), submitted=float(draw(st.integers(0, 40_000))),
            runtime=draw(st.one_of(st.none(), st.sampled_from((60.0, 600.0, 50_000.0, 50_000.0)))),
            name=f"p{i:03d}",
        )  # fmt: skip
    config = team_config(
        dict.fromkeys(TEAMS, 8),
        borrowing=draw(st.sampled_from(({}, {t: 16 for t in TEAMS}))),
        max_preemption_attempts=draw(st.sampled_from((0, 1, 64))),
        preemption_delay_s=draw(st.sampled_from((0.0, 0.0, 15_000.0))),  # holds some jobs back
    )
    return world.snapshot(pending), config


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(behind_a_reservation(), st.sampled_from((ROTA_RULES, SLURM_RULES)), st.sampled_from((2, 5, 64)))
def test_passing_over_changes_no_decision(
    world: tuple[Snapshot, PolicyConfig], rules: Rules, depth: int
) -> None:
    snap, config = world
    fast, reference = _both(snap, config, replace(rules, per_queue_depth=depth))
    assert _decided(fast) == _decided(reference)
    # Every pending job's reasons, ETA, position and score breakdown too: a job passed over
    # gets what its own turn would have given it.
    assert fast.pending == reference.pending
    assert fast.diagnoses == reference.diagnoses
    assert all(e.reasons for e in fast.pending)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(behind_a_reservation(), st.sampled_from((ROTA_RULES, SLURM_RULES)), st.sampled_from((2, 5, 64)))
def test_the_walk_without_any_shortcut_decides_the_same(
    world: tuple[Snapshot, PolicyConfig], rules: Rules, depth: int
) -> None:
    """The reference walk (`walkstate.REFERENCE`: no lane dropped, no job passed over) against
    the shortcuts of `cycle.fast`: the same decisions. Not always the same reasons: a job
    of a lane that `hopeless` drops gets the reasons of a job that had no turn, which can differ
    from those its own turn records (a QUOTA_EXCEEDED first, for one); passing over alone
    keeps every reason, as the test above shows."""
    snap, config = world
    rules = replace(rules, per_queue_depth=depth)
    fast = run_cycle(snap, NOW, config, rules)
    reference = run_cycle(snap, NOW, config, rules, shortcuts=False)
    assert _decided(fast) == _decided(reference)


def test_jobs_passed_over_are_told_which_reservation_blocks_them() -> None:
    world = World(nodes=2)
    world.run("b", "training", node=0, gpus=8, end=NOW + 3600.0)
    world.run("b", "training", node=1, gpus=4, end=NOW + 3600.0)
    head = gpu_jobs("a", "training", gpus=7, workers=2, runtime=3600.0, name="head")
    behind = gpu_jobs("c", "experiment", n=6, gpus=4, submitted=100.0, runtime=50_000.0, name="long")
    short = gpu_jobs("c", "experiment", gpus=4, submitted=200.0, runtime=60.0, name="short")
    config = team_config({"a": 8, "b": 8, "c": 8}, max_preemption_attempts=0)
    fast, reference = _both(world.snapshot(head + behind + short), config, ROTA_RULES)
    assert _decided(fast) == _decided(reference)
    assert [a.job_id for a in fast.admissions] == ["short"]
    reasons = {e.job_id: e.reasons[0] for e in fast.pending}
    for job in behind:
        assert reasons[job.job_id].code is Code.RESERVED_FOR_HIGHER_PRIORITY
        assert reasons[job.job_id].detail("reserved_for") == "head"


def test_a_job_passed_over_that_would_have_preempted_at_its_turn_gets_its_turn() -> None:
    # k was passed over behind j with 4 GPUs free; x, whose turn comes between them, takes 2,
    # so at k's turn it is short of GPUs and, with attempts left, stops the experiment run.
    world = World(nodes=2)
    world.run("b", "training", node=0, gpus=8, end=NOW + 3600.0)
    world.run("b", "experiment", node=1, gpus=4, end=NOW + 3600.0, started=NOW - 3600.0)
    pending = (
        gpu_jobs("a", "training", gpus=7, workers=2, runtime=3600.0, name="head")
        + gpu_jobs("c", "training", gpus=3, submitted=100.0, runtime=50_000.0, name="j")
        + gpu_jobs("a", "training", gpus=2, submitted=200.0, runtime=60.0, name="x")
        + gpu_jobs("c", "training", gpus=3, submitted=300.0, runtime=50_000.0, name="k")
    )
    config = team_config({"a": 8, "b": 8, "c": 8})
    fast, reference = _both(world.snapshot(pending), config, ROTA_RULES)
    assert _decided(fast) == _decided(reference)
    assert [a.job_id for a in fast.admissions] == ["x"]
    assert [p.preemptor_job_id for p in fast.plans] == ["k"]


def _behind_head(extra: list[PendingJob]) -> tuple[Cycle, ReservationBook, list[PendingJob]]:
    """Two nodes, 4 GPUs free now and 12 back at NOW + 3600 s, when the 14-GPU head's
    reservation starts with 2 to spare; 3 long 4-GPU jobs behind it, then `extra`."""
    world = World(nodes=2)
    world.run("b", "training", node=0, gpus=8, end=NOW + 3600.0)
    world.run("b", "training", node=1, gpus=4, end=NOW + 3600.0)
    behind = gpu_jobs("c", "experiment", n=3, gpus=4, submitted=100.0, runtime=50_000.0, name="long") + extra
    config = team_config({"a": 8, "b": 8, "c": 8}, max_preemption_attempts=0)
    cy = Cycle(world.snapshot(behind), NOW, config, ROTA_RULES)
    book = cy.book("gpu")
    book.reserve("head", 1, 14, cy.capacity.state.free_total["gpu"], NOW, 3600.0)
    return cy, book, behind


@pytest.mark.parametrize(
    ("case", "extra", "most", "whole_run"),
    [
        ("long jobs too big for the spare", [], None, True),
        ("a gang that fits the cluster", gpu_jobs("c", "experiment", gpus=8, workers=2, submitted=200.0, runtime=50_000.0), None, True),
        ("one ends before the reservation starts", gpu_jobs("c", "experiment", gpus=4, submitted=200.0, runtime=60.0), None, False),
        ("one fits in the spare", gpu_jobs("c", "experiment", gpus=2, submitted=200.0, runtime=50_000.0), None, False),
        ("one can never fit", gpu_jobs("c", "experiment", gpus=8, workers=3, submitted=200.0, runtime=50_000.0), None, False),
        ("one needs more than is free", [], 3, False),
        ("no estimate: the default runtime outlasts the start", gpu_jobs("c", "experiment", gpus=4, submitted=200.0), None, True),
    ],
)
def test_a_run_behind_a_reservation_is_passed_over_after_one_check(
    case: str, extra: list[PendingJob], most: int | None, whole_run: bool
) -> None:
    """The check of a whole run says yes only when each job's own check would, and it must
    say yes in the common case, or passing over costs a call per job again."""
    cy, book, jobs = _behind_head(extra)
    one_by_one = behind(cy, most)
    assert all_blocked(cy, tuple(jobs), book, most) is whole_run, case
    assert all(one_by_one(job) for job in jobs) is whole_run, case
