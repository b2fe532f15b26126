"""A job that fits is never hidden by the look-ahead window.

`Rules.per_queue_depth` bounds how many blocked jobs of one queue a cycle tries. Past it, the
walk still visits every job of the queue that the free GPUs could hold, so a small job deep in
a queue of big ones starts as soon as there is room for it, not when the big ones are gone.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rota.contracts.messages import WaitReasonCode as Code
from rota_policy import PendingJob, PlanInFlight, PolicyConfig, Slot, Snapshot, schedule
from rota_policy.baselines.slurm import SLURM_RULES
from rota_policy.core import ROTA_RULES
from rota_policy.cycle.engine import Rules, run_cycle
from rota_policy.cycle.outcome import Outcome

from tests.unit.policy.builders import World, gpu_jobs, team_config

NOW = 50_000.0
DAY = 86_400.0


def _deep_queue_and_a_probe(
    pending: int, *, probe_runtime: float | None, whole_cluster_head: bool = False
) -> Snapshot:
    """16 nodes of 8 GPUs, all busy for a day but one GPU; `pending` production jobs of 2-16
    GPUs for a day (after one that needs every GPU, if asked), then a 1-GPU production probe
    of the same team, submitted last."""
    world = World(nodes=16)
    for node in range(16):
        world.run("a", "production", node=node, gpus=7 if node == 15 else 8, end=NOW + DAY)
    jobs = []
    if whole_cluster_head:
        jobs += gpu_jobs("a", "production", gpus=8, workers=16, submitted=-1.0, runtime=DAY,
                         name="head")  # fmt: skip
    for i in range(pending):
        size = (2, 4, 8, 16)[i % 4]
        workers, per = (2, 8) if size == 16 else (1, size)
        jobs += gpu_jobs("a", "production", gpus=per, workers=workers, submitted=float(i),
                         runtime=DAY, name=f"deep{i:04d}")  # fmt: skip
    jobs += gpu_jobs("a", "production", gpus=1, submitted=float(pending), runtime=probe_runtime,
                     name="probe")  # fmt: skip
    return world.snapshot(jobs)


def test_a_fitting_probe_behind_a_thousand_jobs_is_admitted() -> None:
    snap = _deep_queue_and_a_probe(1000, probe_runtime=600.0)
    decisions = schedule(snap, NOW, team_config({"a": 128}))
    assert [a.job_id for a in decisions.admissions] == ["probe"]


def test_a_probe_that_would_delay_a_reservation_is_told_so_not_priority() -> None:
    # It fits the free GPU but would still hold it when the head's reservation of every GPU
    # starts: it was looked at, and its reason says why it waits.
    snap = _deep_queue_and_a_probe(1000, probe_runtime=10 * DAY, whole_cluster_head=True)
    decisions = schedule(snap, NOW, team_config({"a": 128}))
    assert decisions.admissions == ()
    probe = next(e for e in decisions.pending if e.job_id == "probe")
    assert probe.reasons[0].code is Code.RESERVED_FOR_HIGHER_PRIORITY


@st.composite
def deep_queues(draw: st.DrawFn) -> tuple[Snapshot, PolicyConfig]:
    """A few GPUs free, queues far deeper than the window, small jobs scattered in them."""
    world = World(nodes=4, racks=2)
    for node in range(4):
        busy = draw(st.sampled_from((6, 7, 8)))
        world.run("a", "training", node=node, gpus=busy, end=NOW + draw(st.integers(0, 20_000)))
    jobs = []
    for i in range(draw(st.integers(10, 150))):
        jobs += gpu_jobs(
            draw(st.sampled_from(("a", "b"))), draw(st.sampled_from(("production", "training"))),
            gpus=draw(st.sampled_from((1, 2, 4, 8, 8, 8))), submitted=float(draw(st.integers(0, 40_000))),
            runtime=draw(st.sampled_from((60.0, 600.0, DAY))), name=f"p{i:03d}",
        )  # fmt: skip
    config = team_config({"a": 16, "b": 16}, borrowing={"a": 16, "b": 16},
                         max_preemption_attempts=draw(st.sampled_from((0, 1))))  # fmt: skip
    return world.snapshot(jobs), config


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(deep_queues(), st.sampled_from((ROTA_RULES, SLURM_RULES)), st.sampled_from((1, 2, 5)))
def test_the_window_hides_no_job_that_could_start(
    world: tuple[Snapshot, PolicyConfig], rules: Rules, depth: int
) -> None:
    """A job left unvisited is explained at the cycle's end: `PRIORITY` first means it fits
    the GPUs left free and delays no reservation, so its turn would have started it. None may
    be left so; and passing over still changes nothing."""
    snap, config = world
    narrow = replace(rules, per_queue_depth=depth)
    decided = run_cycle(snap, NOW, config, narrow)
    reference = run_cycle(snap, NOW, config, replace(narrow, pass_over=False))
    assert (decided.admissions, decided.plans) == (reference.admissions, reference.plans)
    assert {e.job_id: e.reasons for e in decided.pending} == {
        e.job_id: e.reasons for e in reference.pending
    }
    assert [e.job_id for e in decided.pending if e.reasons[0].code is Code.PRIORITY] == []


def test_a_queue_its_quota_refuses_costs_the_window_not_its_length(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Past the window, a job too big for what its quota allows is passed by like one too big
    # for the free GPUs: it could not start either, so 5,000 of them cost no more than 64.
    world = World(nodes=4)
    pending = gpu_jobs("a", "training", n=5000, gpus=1, runtime=600.0)
    tried: list[str] = []
    block = Outcome.block

    def counted(outcome: Outcome, job: PendingJob, code: Code, detail: str = "") -> None:
        tried.append(job.job_id)
        block(outcome, job, code, detail)

    monkeypatch.setattr(Outcome, "block", counted)
    config = team_config({"a": 0, "b": 32}, borrowing={"a": 0})
    decisions = schedule(world.snapshot(pending), NOW, config)
    assert decisions.admissions == ()
    assert len(tried) <= ROTA_RULES.per_queue_depth
    assert {e.reasons[0].code for e in decisions.pending} == {Code.QUOTA_EXCEEDED}


def test_a_preemptor_whose_plan_is_complete_starts_however_deep_in_its_queue() -> None:
    # Its held GPUs are no longer free, so it does not "fit" them: it is let through anyway.
    world = World(nodes=2)
    world.run("b", "training", node=0, gpus=8, end=NOW + DAY)
    pending = gpu_jobs("a", "production", n=100, gpus=8, runtime=600.0)
    preemptor = pending[79].job_id
    world.plans.append(PlanInFlight(preemptor, (), (Slot(0, "n1", tuple(range(8))),)))
    config = team_config({"a": 16, "b": 8}, max_preemption_attempts=0)
    decisions = schedule(world.snapshot(pending), NOW, config)
    assert [(a.job_id, a.via_plan) for a in decisions.admissions] == [(preemptor, True)]
