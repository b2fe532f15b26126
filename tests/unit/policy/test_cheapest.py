"""The victim search with an early exit finds the reference's plan.

`cheapest.cheapest_plan` stops costing victims once the first offers in cost order seat the
gang; `preemption.rota_plan` costs every run the job may stop. On random clusters (runs of
every tier, team, size and age, spanning nodes, resumable or not, some already victims) and
random preemptors, both must give the same plan, or both none; with random per-queue
protection too (who may preempt each queue, its minimum runtime and budget), and clusters that
declare levels (block > rack) with preemptors that require or prefer one; and GPU shares
(DECISIONS 84): GPUs shared by runs of any tier, team and age, as victims, and share preemptors.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rota.contracts.common import Tier
from rota_policy import PendingJob, PolicyConfig, TierPolicy
from rota_policy.core import ROTA_RULES
from rota_policy.cycle.engine import Cycle
from rota_policy.preemption.cheapest import cheapest_plan
from rota_policy.preemption.search import rota_plan

from tests.unit.policy.builders import World, gpu_jobs, team_config

NOW = 50_000.0
TEAMS = ("a", "b", "c")
TIERS = ("production", "training", "experiment")
TOPOLOGIES = (None, None, ("rack", None), ("block", None), (None, "block"), ("block", "rack"))


def protections(base: TierPolicy) -> st.SearchStrategy[TierPolicy]:
    """A queue's protection: any set of tiers that may preempt it, minimum runtimes about the
    generated runs' ages, budgets about their preemption counts."""
    return st.builds(
        replace, st.just(base),
        preemptible_by=st.one_of(st.none(), st.frozensets(st.sampled_from(tuple(Tier)))),
        min_runtime_s=st.sampled_from((None, 0.0, 500.0, 5_000.0)),
        max_preemptions_per_job=st.sampled_from((None, 0, 21)),
    )  # fmt: skip


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Cycle, list[PendingJob]]:
    nodes = draw(st.integers(2, 8))
    world = World(nodes=nodes, racks=draw(st.sampled_from((1, 2, 4))), blocks=draw(st.sampled_from((0, 0, 1, 2))))
    for node in range(nodes):
        for _ in range(draw(st.sampled_from((0, 0, 1, 2)))):  # GPUs that shares hold, filled or nearly
            shares = draw(st.sampled_from(((2, 2), (1, 1, 2), (3, 1), (2,), (1, 2), (1, 1, 1, 1))))
            if not world.free[node]:
                break  # a gang of the node before spans it
            gpu = world.free[node][0]
            for share in shares:
                world.run(
                    draw(st.sampled_from(TEAMS)), draw(st.sampled_from(TIERS[1:] + TIERS)), node=node,
                    share=share, gpu=gpu, started=NOW - draw(st.sampled_from((100.0, 900.0, 20_000.0))),
                    resumable=draw(st.booleans()), preemptions=draw(st.sampled_from((0, 0, 20))),
                    checkpoint=NOW - draw(st.sampled_from((0.0, 50.0, 700.0))),
                )  # fmt: skip
        # Full nodes, but for a GPU or two: a job short of GPUs must stop someone.
        while len(world.free[node]) > draw(st.sampled_from((0, 0, 0, 1, 2))):
            left = len(world.free[node])
            gpus = draw(st.sampled_from([g for g in (1, 1, 2, 4, 8) if g <= left]))
            span = [node]
            if node + 1 < nodes and len(world.free[node + 1]) >= gpus and draw(st.integers(0, 4)) == 0:
                span.append(node + 1)
            world.run(
                draw(st.sampled_from(TEAMS)), draw(st.sampled_from(TIERS[1:] + TIERS)), node=span,
                gpus=gpus, started=NOW - draw(st.sampled_from((100.0, 900.0, 900.0, 20_000.0))),
                resumable=draw(st.booleans()), preemptions=draw(st.sampled_from((0, 0, 0, 20))),
                checkpoint=NOW - draw(st.sampled_from((0.0, 50.0, 700.0))),
            )  # fmt: skip
    jobs = [
        gpu_jobs(
            draw(st.sampled_from(TEAMS)), draw(st.sampled_from(TIERS[:2] if i % 2 else TIERS)),
            gpus=draw(st.sampled_from((1, 2, 4, 8))), workers=draw(st.sampled_from((1, 1, 2, 3))),
            rack=(rack := draw(st.sampled_from(("none", "none", "preferred", "required")))), name=f"j{i}",
            topology=None if rack != "none" else draw(st.sampled_from(TOPOLOGIES)),
            share=draw(st.sampled_from((0, 0, 0, 1, 2, 3))),
        )[0]
        for i in range(draw(st.integers(1, 6)))
    ]  # fmt: skip
    config: PolicyConfig = team_config(
        {t: draw(st.sampled_from((0, 8, 16, 32))) for t in TEAMS},
        borrowing=draw(st.sampled_from(({}, dict.fromkeys(TEAMS, 64)))),
        max_lost_gpu_s_per_plan=draw(st.sampled_from((0.0, None, 5_000.0))),
        shareable=frozenset({"gpu"}),
    )
    if draw(st.booleans()):
        config = config.with_overrides(tiers={t: draw(protections(config.tier(t))) for t in Tier})
    cy = Cycle(world.snapshot(jobs), NOW, config, ROTA_RULES)
    for run in world.runs:
        if draw(st.integers(0, 5)) == 0:
            cy.capacity.taken.add(run.run_id)  # a victim of a plan already made
    return cy, jobs


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_the_early_exit_finds_the_reference_plan(world: tuple[Cycle, list[PendingJob]]) -> None:
    cy, jobs = world
    ctx = cy.preemption
    for job in jobs:
        assert cheapest_plan(job, ctx) == rota_plan(job, ctx)


def test_some_searches_find_a_plan() -> None:
    """The random clusters above are not all hopeless: a lower-tier run on the only node."""
    world = World(nodes=1)
    world.run("b", "experiment", gpus=8, started=NOW - 900.0)
    cy = Cycle(world.snapshot([]), NOW, team_config(dict.fromkeys(TEAMS, 8)), ROTA_RULES)
    job = gpu_jobs("a", "training", gpus=4)[0]
    plan = cheapest_plan(job, cy.preemption)
    assert plan is not None and plan == rota_plan(job, cy.preemption)


def test_some_searches_stop_shares() -> None:
    """Shares are among the victims the random clusters offer: a whole GPU from two halves,
    room for a half from one of them; both searches agree."""
    world = World(nodes=1)
    world.run("b", "training", gpus=7, started=NOW - 900.0)
    world.run("b", "experiment", share=2, gpu=7, started=NOW - 900.0, run_id="h1")
    world.run("b", "experiment", share=2, gpu=7, started=NOW - 900.0, run_id="h2")
    config = team_config(dict.fromkeys(TEAMS, 8), shareable=frozenset({"gpu"}))
    cy = Cycle(world.snapshot([]), NOW, config, ROTA_RULES)
    whole, half = gpu_jobs("a", "training", gpus=1)[0], gpu_jobs("a", "training", share=2)[0]
    for job, stopped in ((whole, {"h1", "h2"}), (half, {"h1"})):
        plan = cheapest_plan(job, cy.preemption)
        assert plan is not None and plan == rota_plan(job, cy.preemption)
        assert {v.run_id for v in plan.victims} == stopped
