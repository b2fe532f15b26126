"""Properties of elastic gangs over random worlds (DECISIONS 70-74).

- an elastic gang stays between its min and max: admitted at no fewer than min workers and no
  more than max, shrunk to no fewer than min, grown to no more than max;
- no GPU is given twice: admissions, plan targets and grows take free GPUs (or, for a plan,
  its victims' dropped ones) and never the same GPU;
- the walk's shortcuts decide as the reference walk when jobs and runs are elastic.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rota_policy import POLICIES, PolicyConfig, Snapshot
from rota_policy.core import ROTA_RULES
from rota_policy.cycle.engine import run_cycle

from tests.unit.policy.builders import World, gpu_jobs, team_config

NOW = 50_000.0
TEAMS = ("a", "b")


@st.composite
def worlds(draw: st.DrawFn) -> tuple[Snapshot, PolicyConfig]:
    nodes = draw(st.integers(2, 8))
    world = World(nodes=nodes, racks=2)
    node = 0
    while node < nodes:
        span = draw(st.integers(1, min(3, nodes - node)))
        kind = draw(st.sampled_from(("idle", "rigid", "elastic", "elastic")))
        if kind != "idle":
            run = world.run(draw(st.sampled_from(TEAMS)), draw(st.sampled_from(("training", "experiment"))),
                            node=list(range(node, node + span)), gpus=8,
                            started=NOW - draw(st.integers(0, 8000)), end=NOW + draw(st.integers(0, 20_000)),
                            resumable=kind == "elastic" or draw(st.booleans()))  # fmt: skip
            if kind == "elastic":
                world.runs[-1] = replace(run, workers_range=(draw(st.integers(1, span)), span + draw(st.integers(0, 3))))
        node += span
    pending = []
    for i in range(draw(st.sampled_from((0, 0, 0, 1, 2, 5, 12)))):
        workers = draw(st.integers(1, 3))
        pending += gpu_jobs(
            draw(st.sampled_from(TEAMS)), draw(st.sampled_from(("production", "training", "experiment"))),
            gpus=draw(st.sampled_from((2, 4, 8))), workers=workers,
            workers_max=draw(st.sampled_from((0, workers + 1, workers + 4))),
            submitted=float(draw(st.integers(0, 40_000))),
            runtime=draw(st.one_of(st.none(), st.sampled_from((600.0, 50_000.0)))), name=f"p{i:02d}",
        )  # fmt: skip
    quotas = {t: draw(st.sampled_from((0, 8, 16, 32))) for t in TEAMS}
    borrowing = draw(st.sampled_from(({}, dict.fromkeys(TEAMS, 0))))
    config = team_config(quotas, borrowing=borrowing, max_preemption_attempts=draw(st.sampled_from((0, 8))))
    return world.snapshot(pending), config


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.sampled_from(sorted(POLICIES)))
def test_an_elastic_gang_stays_between_min_and_max(world: tuple[Snapshot, PolicyConfig], policy: str) -> None:
    snap, config = world
    d = POLICIES[policy](snap, NOW, config)
    jobs = {j.job_id: j for q in snap.pending for j in q.jobs}
    runs = {r.run_id: r for r in snap.running}
    for a in d.admissions:
        job = jobs[a.job_id]
        most = job.workers_max if job.elastic else job.workers
        assert job.workers <= len(a.placement) <= most, (a, job)
        assert all(len(s.gpus) == job.gpus_per_worker for s in a.placement)
    for plan in d.plans:
        for v in plan.victims:
            run = runs[v.run_id]
            if v.shrink_to:
                assert run.workers_range is not None and run.resumable
                assert run.workers_range[0] <= v.shrink_to < len(run.placement)
    for grow in d.grows:
        run = runs[grow.run_id]
        assert run.workers_range is not None
        assert len(run.placement) < grow.workers <= run.workers_range[1]
        assert grow.workers == len(run.placement) + len(grow.added)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_no_gpu_is_given_twice(world: tuple[Snapshot, PolicyConfig]) -> None:
    snap, config = world
    d = POLICIES["rota"](snap, NOW, config)
    free = {(n.name, g) for n in snap.nodes for g in n.free}
    runs = {r.run_id: r for r in snap.running}
    given_out: list[tuple[str, int]] = []
    for a in d.admissions:
        given_out += [(s.node, g) for s in a.placement for g in s.gpus]
    for grow in d.grows:
        given_out += [(s.node, g) for s in grow.added for g in s.gpus]
    assert len(given_out) == len(set(given_out)) and set(given_out) <= free
    for plan in d.plans:
        released = set(free)
        for v in plan.victims:
            slots = runs[v.run_id].placement[v.shrink_to:]
            released |= {(s.node, g) for s in slots for g in s.gpus}
        target = [(s.node, g) for s in plan.target for g in s.gpus]
        assert len(target) == len(set(target)) and set(target) <= released
        assert not set(target) & set(given_out)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_shortcuts_decide_as_the_reference_walk_with_elastic_gangs(world: tuple[Snapshot, PolicyConfig]) -> None:
    snap, config = world
    fast = run_cycle(snap, NOW, config, ROTA_RULES)
    reference = run_cycle(snap, NOW, config, replace(ROTA_RULES, pass_over=False))
    assert (fast.admissions, fast.plans, fast.grows) == (reference.admissions, reference.plans, reference.grows)
    assert fast.pending == reference.pending
