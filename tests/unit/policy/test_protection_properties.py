"""Per-queue protection over random worlds (hypothesis): what no plan may ever do, that a
config which spells out the global values per queue decides exactly as one that does not, and
that work is lost only where a lender past its wait target takes back what others borrowed."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rota.contracts.common import Tier
from rota_policy import POLICIES, PolicyConfig, Snapshot

from tests.unit.policy.builders import World, gpu_jobs, team_config
from tests.unit.policy.test_cheapest import TEAMS, TIERS, protections
from tests.unit.policy.test_policy_properties import NOW, SETTINGS, worlds


@st.composite
def protected_worlds(draw: st.DrawFn) -> tuple[Snapshot, PolicyConfig]:
    """Nearly full nodes, jobs that waited past their wait target (so Rota searches for them),
    and random protection for every queue, delays included."""
    nodes = draw(st.integers(1, 6))
    world = World(nodes=nodes)
    for node in range(nodes):
        while len(world.free[node]) > draw(st.sampled_from((0, 0, 1, 2))):
            left = len(world.free[node])
            world.run(
                draw(st.sampled_from(TEAMS)), draw(st.sampled_from(TIERS)), node=node,
                gpus=draw(st.sampled_from([g for g in (1, 2, 4, 8) if g <= left])),
                started=NOW - draw(st.sampled_from((100.0, 900.0, 20_000.0))),
                preemptions=draw(st.sampled_from((0, 0, 2, 20))), end=NOW + 50_000,
            )  # fmt: skip
    jobs = [
        gpu_jobs(draw(st.sampled_from(TEAMS)), draw(st.sampled_from(TIERS)), gpus=draw(st.sampled_from((1, 4, 8))),
                 workers=draw(st.sampled_from((1, 1, 2))),
                 submitted=NOW - draw(st.sampled_from((100.0, 5_000.0, 50_000.0))), name=f"j{i}")[0]
        for i in range(draw(st.integers(1, 5)))
    ]  # fmt: skip
    config = team_config({t: draw(st.sampled_from((0, 8, 16))) for t in TEAMS},
                         min_runtime_s=draw(st.sampled_from((0.0, 300.0, 5_000.0))))
    tiers = {t: draw(protections(config.tier(t))) for t in Tier}
    tiers = {t: replace(p, preemption_delay_s=draw(st.sampled_from((None, 0.0, 600.0, 10_000.0))))
             for t, p in tiers.items()}  # fmt: skip
    return world.snapshot(jobs), config.with_overrides(tiers=tiers)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(protected_worlds())
def test_no_victim_its_queue_protects(world: tuple[Snapshot, PolicyConfig]) -> None:
    snap, config = world
    runs = {r.run_id: r for r in snap.running}
    pending = {j.job_id: j for q in snap.pending for j in q.jobs}
    d = POLICIES["rota"](snap, NOW, config)
    for plan in d.plans:
        preemptor = pending[plan.preemptor_job_id]
        assert config.preemption_allowed_at(preemptor.tier, preemptor.submitted_at) <= NOW
        for victim in plan.victims:
            run = runs[victim.run_id]
            rule = config.protection(run.tier)
            by = config.tier(run.tier).preemptible_by
            assert by is None or plan.preemptor_tier in by, (plan.preemptor_tier, run.tier, by)
            assert NOW - run.started_at >= rule.min_runtime_s
            assert run.preemptions < rule.max_preemptions
    assert {job_id for job_id, _ in d.deferred}.isdisjoint(p.preemptor_job_id for p in d.plans)


@SETTINGS
@given(worlds(), st.sampled_from((0.0, 300.0, 5_000.0)), st.sampled_from((0, 2, 10)))
def test_per_queue_values_equal_to_the_global_ones_decide_as_before(
    world: tuple[Snapshot, PolicyConfig], min_runtime: float, budget: int
) -> None:
    snap, config = world
    config = config.with_overrides(min_runtime_s=min_runtime, max_preemptions_per_job=budget)
    spelled = config.with_overrides(tiers={
        t: replace(config.tier(t), preemptible_by=frozenset(Tier), min_runtime_s=min_runtime,
                   max_preemptions_per_job=budget, preemption_delay_s=0.0)
        for t in Tier
    })  # fmt: skip
    assert POLICIES["rota"](snap, NOW, spelled) == POLICIES["rota"](snap, NOW, config)


@st.composite
def borrowed_worlds(draw: st.DrawFn) -> tuple[Snapshot, PolicyConfig]:
    """Full nodes of runs that may or may not checkpoint, of teams that mostly borrow from the
    first, and jobs that waited about their wait target (3600 s)."""
    nodes = draw(st.integers(1, 4))
    world = World(nodes=nodes)
    for node in range(nodes):
        while world.free[node]:
            left = len(world.free[node])
            world.run(
                draw(st.sampled_from(TEAMS)), draw(st.sampled_from(TIERS)), node=node,
                gpus=draw(st.sampled_from([g for g in (2, 4, 8) if g <= left] or [left])),
                started=NOW - draw(st.sampled_from((400.0, 2_000.0, 20_000.0))),
                resumable=draw(st.booleans()), end=NOW + 50_000,
            )  # fmt: skip
    jobs = [
        gpu_jobs(draw(st.sampled_from(TEAMS)), draw(st.sampled_from(TIERS)), gpus=draw(st.sampled_from((2, 4, 8))),
                 workers=draw(st.sampled_from((1, 1, 2))),
                 submitted=NOW - draw(st.sampled_from((600.0, 3_599.0, 3_600.0, 20_000.0))), name=f"j{i}")[0]
        for i in range(draw(st.integers(1, 4)))
    ]  # fmt: skip
    quotas = {TEAMS[0]: draw(st.sampled_from((8, 16, 32))), **{t: draw(st.sampled_from((0, 0, 8))) for t in TEAMS[1:]}}
    cap = draw(st.sampled_from((0.0, 0.0, 5_000.0)))
    return world.snapshot(jobs), team_config(quotas, max_lost_gpu_s_per_plan=cap)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(borrowed_worlds())
def test_a_plan_loses_work_only_where_a_lender_past_its_wait_target_takes_back_borrowed_gpus(
    world: tuple[Snapshot, PolicyConfig],
) -> None:
    """The loss cap counts every victim but other teams' borrowers taken back by a job that has
    waited its wait target; those borrowers' loss is in the plan's expected loss, and together
    they hold no more than their team borrows (counting the cycle's admissions, and the
    preemptors of the plans made before, whose GPUs the cycle holds for them from then on:
    `Cycle.accept_plan`)."""
    snap, config = world
    cap = config.max_lost_gpu_s_per_plan
    assert cap is not None
    d = POLICIES["rota"](snap, NOW, config)
    pending = {j.job_id: j for q in snap.pending for j in q.jobs}
    in_use: Counter[str] = Counter()
    for run in snap.running:
        in_use[run.team] += run.gpus
    for admission in d.admissions:
        in_use[pending[admission.job_id].team] += pending[admission.job_id].gpus
    for plan in d.plans:
        job = pending[plan.preemptor_job_id]
        assert plan.expected_lost_gpu_s == sum(v.expected_lost_gpu_s for v in plan.victims)
        held_from_here, in_use[job.team] = in_use.copy(), in_use[job.team] + job.gpus
        if plan.expected_lost_gpu_s <= cap:
            continue
        assert NOW - job.submitted_at >= config.tier(job.tier).long_wait_s, plan
        taken: Counter[str] = Counter()
        lost: Counter[str] = Counter()
        for v in plan.victims:
            taken[v.team] += v.gpus
            lost[v.team] += v.expected_lost_gpu_s
        reclaimed = {
            t for t in taken if t != job.team and taken[t] <= held_from_here[t] - config.team(t).on("gpu").quota
        }
        assert sum(gpu_s for t, gpu_s in lost.items() if t not in reclaimed) <= cap, plan
        assert reclaimed, plan
