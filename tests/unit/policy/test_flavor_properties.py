"""Properties of flavor fallback over random multi-flavor worlds.

- an admitted job starts on one of the flavors it lists, on nodes of that flavor alone;
- no admission takes a team past its quota plus borrowing limit on the flavor it starts on;
- the walk's shortcuts decide as the reference walk when some jobs list several flavors.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rota_policy import POLICIES, PolicyConfig, Snapshot
from rota_policy.core import ROTA_RULES
from rota_policy.cycle.engine import run_cycle
from rota_policy.cycle.fast.shortcuts import Shortcuts
from rota_policy.cycle.walkstate import FastPath

from tests.unit.policy.builders import World, gpu_jobs, team_config

NOW = 50_000.0
FLAVORS = ("a100", "v100", "t4")
TEAMS = ("a", "b", "c")


@st.composite
def worlds(draw: st.DrawFn) -> tuple[Snapshot, PolicyConfig]:
    nodes = draw(st.integers(3, 6))
    flavors = {i: draw(st.sampled_from(FLAVORS)) for i in range(nodes)}
    world = World(nodes=nodes, racks=2, flavors=flavors)
    for node in range(nodes):
        busy = draw(st.sampled_from((0, 0, 4, 8)))
        if busy:
            world.run(draw(st.sampled_from(TEAMS)), draw(st.sampled_from(("training", "experiment"))), node=node,
                      gpus=busy, started=NOW - draw(st.integers(0, 4000)), end=NOW + draw(st.integers(0, 20_000)))
    pending = []
    for i in range(draw(st.integers(1, 25))):
        listed = draw(st.lists(st.sampled_from(FLAVORS), min_size=1, max_size=3, unique=True))
        pending += gpu_jobs(
            draw(st.sampled_from(TEAMS)), draw(st.sampled_from(("production", "training", "experiment"))),
            gpus=draw(st.sampled_from((1, 2, 4, 8))), workers=draw(st.sampled_from((1, 1, 2))),
            submitted=float(draw(st.integers(0, 40_000))),
            runtime=draw(st.one_of(st.none(), st.sampled_from((600.0, 50_000.0)))),
            flavor=listed[0], fallback=tuple(listed[1:]), name=f"p{i:02d}",
        )  # fmt: skip
    quotas = {t: {f: draw(st.sampled_from((0, 4, 8, 16))) for f in FLAVORS} for t in TEAMS}
    borrowing = draw(st.sampled_from(({}, dict.fromkeys(TEAMS, 0), dict.fromkeys(TEAMS, 8))))
    config = team_config(flavors=quotas, borrowing=borrowing,
                         max_preemption_attempts=draw(st.sampled_from((0, 8))))
    return world.snapshot(pending), config


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.sampled_from(sorted(POLICIES)))
def test_an_admitted_job_is_on_a_listed_flavor_within_quota(world: tuple[Snapshot, PolicyConfig], policy: str) -> None:
    snap, config = world
    d = POLICIES[policy](snap, NOW, config)
    jobs = {j.job_id: j for q in snap.pending for j in q.jobs}
    flavor_of = {n.name: n.flavor for n in snap.nodes}
    used: dict[tuple[str, str], int] = {}
    for run in snap.running:
        used[(run.team, run.flavor)] = used.get((run.team, run.flavor), 0) + run.gpus
    for a in d.admissions:
        job = jobs[a.job_id]
        assert a.flavor in job.flavors
        assert {flavor_of[s.node] for s in a.placement} == {a.flavor}
        assert sum(len(s.gpus) for s in a.placement) == job.gpus
        key = (job.team, a.flavor)
        used[key] = used.get(key, 0) + job.gpus
        limits = config.team(job.team).on(a.flavor)
        if limits.borrowing_limit is not None and policy != "fifo" and policy != "slurm":
            assert used[key] <= limits.quota + limits.borrowing_limit, (a, used[key], limits)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_shortcuts_decide_as_the_reference_walk_with_multi_flavor_jobs(world: tuple[Snapshot, PolicyConfig]) -> None:
    snap, config = world
    fast = run_cycle(snap, NOW, config, ROTA_RULES)
    reference = run_cycle(snap, NOW, config, replace(ROTA_RULES, pass_over=False))
    assert (fast.admissions, fast.plans) == (reference.admissions, reference.plans)
    assert fast.pending == reference.pending


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.sampled_from(sorted(POLICIES)))
def test_dropping_hopeless_multi_flavor_queues_changes_no_decision(
    world: tuple[Snapshot, PolicyConfig], policy: str
) -> None:
    """`Shortcuts.hopeless` drops a queue only if no flavor its jobs accept could start,
    preempt or reserve for any of them: without it, the walk decides the same."""
    snap, config = world
    fast = POLICIES[policy](snap, NOW, config)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Shortcuts, "hopeless", FastPath.hopeless)  # drops no lane
        reference = POLICIES[policy](snap, NOW, config)
    assert (fast.admissions, fast.plans) == (reference.admissions, reference.plans)


def test_single_flavor_jobs_decide_as_before_when_fallback_is_cut() -> None:
    """A job listing one flavor is the job it always was: `fallback=()` is the default."""
    job = gpu_jobs("a", flavor="a100")[0]
    assert job.fallback == () and job.flavors == ("a100",) and job.on("a100") == job
