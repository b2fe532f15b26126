"""Per-queue protection over random worlds (hypothesis): what no plan may ever do, and that a
config which spells out the global values per queue decides exactly as one that does not."""

from __future__ import annotations

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
