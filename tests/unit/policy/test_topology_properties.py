"""Properties of topology levels over random clusters with blocks and racks (hypothesis).

- every admitted job, and every plan's target, lies in one domain of the job's required level;
- no GPU is allocated twice, and only free ones (or a plan's victims') are;
- the walk's shortcuts decide as the reference walk when jobs ask for levels.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rota_policy import POLICIES, PolicyConfig, Snapshot
from rota_policy.core import ROTA_RULES
from rota_policy.cycle.engine import run_cycle
from rota_policy.model.layout import layout_of

from tests.unit.policy.builders import World, gpu_jobs, team_config

NOW = 50_000.0
TEAMS = ("a", "b", "c")
NEEDS = (
    None, None, ("rack", None), ("block", None), (None, "block"), ("block", "rack"), (None, "rack"),
    ("node", None),
)
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def worlds(draw: st.DrawFn) -> tuple[Snapshot, PolicyConfig]:
    nodes = draw(st.integers(2, 8))
    racks = draw(st.integers(1, 4))
    world = World(nodes=nodes, racks=racks, blocks=draw(st.sampled_from((0, 1, 2))))
    for node in range(nodes):
        busy = draw(st.sampled_from((0, 0, 2, 4, 8)))
        if busy:
            world.run(draw(st.sampled_from(TEAMS)), draw(st.sampled_from(("training", "experiment"))), node=node,
                      gpus=busy, started=NOW - draw(st.integers(0, 4000)), end=NOW + draw(st.integers(0, 20_000)),
                      resumable=draw(st.booleans()))
    pending = []
    for i in range(draw(st.integers(1, 14))):
        pending += gpu_jobs(
            draw(st.sampled_from(TEAMS)), draw(st.sampled_from(("production", "training", "experiment"))),
            gpus=draw(st.sampled_from((1, 2, 4, 8))), workers=draw(st.sampled_from((1, 2, 2, 3))),
            submitted=float(draw(st.integers(0, 40_000))),
            runtime=draw(st.one_of(st.none(), st.sampled_from((600.0, 50_000.0)))),
            topology=draw(st.sampled_from(NEEDS)), name=f"p{i:02d}",
        )  # fmt: skip
    config = team_config({t: draw(st.sampled_from((0, 8, 16, 32))) for t in TEAMS},
                         borrowing=draw(st.sampled_from(({}, dict.fromkeys(TEAMS, 0)))),
                         max_lost_gpu_s_per_plan=draw(st.sampled_from((0.0, None))))
    return world.snapshot(pending), config


@SETTINGS
@given(worlds(), st.sampled_from(sorted(POLICIES)))
def test_required_topology_always_holds_and_nothing_is_allocated_twice(
    world: tuple[Snapshot, PolicyConfig], policy: str
) -> None:
    snap, config = world
    d = POLICIES[policy](snap, NOW, config)
    jobs = {j.job_id: j for q in snap.pending for j in q.jobs}
    layout = layout_of(snap.nodes)
    free = {n.name: set(n.free) for n in snap.nodes}
    held = {r.run_id: {(s.node, g) for s in r.placement for g in s.gpus} for r in snap.running}
    used: Counter[tuple[str, int]] = Counter()
    placed = [(jobs[a.job_id], a.placement, set[tuple[str, int]]()) for a in d.admissions]
    placed += [(jobs[p.preemptor_job_id], p.target, {x for v in p.victims for x in held[v.run_id]})
               for p in d.plans]
    for job, slots, freed in placed:
        assert len(slots) == job.workers and all(len(s.gpus) == job.gpus_per_worker for s in slots)
        required = job.need[0]
        if required is not None:
            domains = layout.domains(required)
            assert len({domains[layout.index[s.node]] for s in slots}) == 1, (job, slots)
        for s in slots:
            for g in s.gpus:
                used[(s.node, g)] += 1
                assert g in free[s.node] or (s.node, g) in freed
    assert all(c == 1 for c in used.values()), used.most_common(3)


@SETTINGS
@given(worlds())
def test_shortcuts_decide_as_the_reference_walk_with_topology(world: tuple[Snapshot, PolicyConfig]) -> None:
    snap, config = world
    fast = run_cycle(snap, NOW, config, ROTA_RULES)
    reference = run_cycle(snap, NOW, config, replace(ROTA_RULES, pass_over=False))
    assert (fast.admissions, fast.plans) == (reference.admissions, reference.plans)
    assert fast.pending == reference.pending
    assert fast.diagnoses == reference.diagnoses


def test_some_worlds_admit_gangs_bound_to_a_level() -> None:
    """The properties above are not vacuous: a gang bound to a block is admitted in one."""
    world = World(nodes=4, racks=4, blocks=2)
    snap = world.snapshot(gpu_jobs("a", workers=2, topology=("block", None), name="g"))
    d = POLICIES["rota"](snap, NOW, team_config({"a": 16}))
    assert [s.node for a in d.admissions for s in a.placement] == ["n0", "n1"]
