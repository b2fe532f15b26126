"""Invariants of every cycle, over random clusters and workloads (hypothesis)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from unittest.mock import patch

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rota.contracts.common import Tier
from rota.contracts.job import RackAffinity
from rota_policy import (
    POLICIES,
    Decisions,
    NodeState,
    PendingJob,
    PolicyConfig,
    RunningRun,
    Slot,
    Snapshot,
    TeamLimits,
    TeamPolicy,
    group_pending,
)
from rota_policy.model.layout import layout_of
from rota_policy.preemption import search as preemption

TEAMS = ("a", "b", "c")
TIERS = (Tier.production, Tier.training, Tier.experiment)
NOW = 100_000.0
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def worlds(draw: st.DrawFn) -> tuple[Snapshot, PolicyConfig]:
    n_nodes = draw(st.integers(1, 6))
    racks = draw(st.integers(1, 3))
    gpus = draw(st.sampled_from((4, 8)))
    capacity = n_nodes * gpus
    quotas = {t: draw(st.integers(0, capacity // 2)) for t in TEAMS}
    limits = {
        t: TeamLimits(
            q,
            draw(st.one_of(st.none(), st.integers(0, capacity))),
            draw(st.one_of(st.none(), st.integers(0, q))),
        )
        for t, q in quotas.items()
    }
    config = PolicyConfig(teams={t: TeamPolicy(t, 1.0, {"gpu": lim}) for t, lim in limits.items()})
    free = [list(range(gpus)) for _ in range(n_nodes)]
    running: list[RunningRun] = []
    for i in range(draw(st.integers(0, 8))):
        # A gang's workers may share a node: a victim then frees GPUs there more than once.
        workers = draw(st.lists(st.integers(0, n_nodes - 1), min_size=1, max_size=3))
        want = draw(st.integers(1, gpus))
        if any(len(free[node]) < want * workers.count(node) for node in workers):
            continue
        placement = []
        for w, node in enumerate(workers):
            placement.append(Slot(w, f"n{node}", tuple(free[node][:want])))
            del free[node][:want]
        running.append(
            RunningRun(
                run_id=f"r{i}", job_id=f"rj{i}", team=draw(st.sampled_from(TEAMS)),
                tier=draw(st.sampled_from(TIERS)), flavor="gpu", placement=tuple(placement),
                gpus=want * len(workers), started_at=NOW - draw(st.sampled_from((10.0, 1000.0, 50_000.0))),
                last_checkpoint_at=NOW - 500.0, resumable=draw(st.booleans()),
                preemptions=draw(st.integers(0, 4)), expected_end=NOW + draw(st.integers(0, 20_000)),
            )
        )  # fmt: skip
    pending = []
    for i in range(draw(st.integers(1, 12))):
        per_worker = draw(st.integers(1, gpus))
        pending.append(
            PendingJob(
                job_id=f"p{i:02d}", team=draw(st.sampled_from((*TEAMS, "stranger"))),
                tier=draw(st.sampled_from(TIERS)), flavor=draw(st.sampled_from(("gpu", "gpu", "gpu", "tpu"))),
                workers=draw(st.integers(1, 3)), gpus_per_worker=per_worker,
                submitted_at=float(draw(st.integers(0, 50_000))),
                runtime_estimate_s=draw(st.one_of(st.none(), st.floats(60, 50_000))),
                rack=draw(st.sampled_from(tuple(RackAffinity))), resumable=draw(st.booleans()),
            )
        )  # fmt: skip
    per_rack = -(-n_nodes // racks)
    nodes = tuple(NodeState(f"n{i}", "gpu", f"r{i // per_rack}", gpus, tuple(f)) for i, f in enumerate(free))
    usage = {t: float(draw(st.integers(0, 10**6))) for t in TEAMS}
    return Snapshot(nodes, tuple(running), group_pending(pending), usage), config


def _check_invariants(snap: Snapshot, config: PolicyConfig, d: Decisions, policy: str) -> None:
    jobs = {j.job_id: j for q in snap.pending for j in q.jobs}
    node_free = {n.name: set(n.free) for n in snap.nodes}
    runs = {r.run_id: r for r in snap.running}
    # No GPU allocated twice, and only GPUs that are free now.
    used: Counter[tuple[str, int]] = Counter()
    for a in d.admissions:
        job = jobs[a.job_id]
        # Gangs are all or nothing: every worker placed, each with its full share.
        assert len(a.placement) == job.workers
        assert all(len(s.gpus) == job.gpus_per_worker for s in a.placement)
        for s in a.placement:
            for g in s.gpus:
                used[(s.node, g)] += 1
                assert g in node_free[s.node]
    for p in d.plans:
        for s in p.target:
            for g in s.gpus:
                used[(s.node, g)] += 1
    assert all(c == 1 for c in used.values()), used.most_common(3)
    # Every pending job that was not admitted has at least one reason.
    admitted = {a.job_id for a in d.admissions}
    explained = {e.job_id: e for e in d.pending}
    assert set(explained) == set(jobs) - admitted
    assert all(e.reasons for e in explained.values())
    # A plan frees enough for its preemptor: its target is made of GPUs that are free now or
    # held by its victims, and matches the job's gang shape.
    for p in d.plans:
        job = jobs[p.preemptor_job_id]
        assert len(p.target) == job.workers and all(len(s.gpus) == job.gpus_per_worker for s in p.target)
        victim_gpus = {(s.node, g) for v in p.victims for s in runs[v.run_id].placement for g in s.gpus}
        for s in p.target:
            for g in s.gpus:
                assert g in node_free[s.node] or (s.node, g) in victim_gpus
    if policy in ("rota", "kueue"):
        # Usage above nominal quota only by borrowing within the limits.
        in_use: Counter[str] = Counter()
        for r in snap.running:
            in_use[r.team] += r.gpus
        for a in d.admissions:
            job = jobs[a.job_id]
            in_use[job.team] += job.gpus
            lim = config.team(job.team).on("gpu")
            if lim.borrowing_limit is not None:
                before = in_use[job.team] - job.gpus
                assert in_use[job.team] <= max(before, lim.quota + lim.borrowing_limit)


def _no_production_victim_while_lower_tier_option(snap: Snapshot, config: PolicyConfig, d: Decisions) -> None:
    """If the first plan stops production work, protecting all production work must leave
    that preemptor without any plan: there was no lower-tier option."""
    if not d.plans or not any(v.tier is Tier.production for v in d.plans[0].victims):
        return
    protected = tuple(
        replace(r, preemptions=config.max_preemptions_per_job) if r.tier is Tier.production else r
        for r in snap.running
    )
    again = POLICIES["rota"](replace(snap, running=protected), NOW, config)
    assert d.plans[0].preemptor_job_id not in {p.preemptor_job_id for p in again.plans}


@SETTINGS
@given(worlds())
def test_rota_invariants(world: tuple[Snapshot, PolicyConfig]) -> None:
    snap, config = world
    decisions = POLICIES["rota"](snap, NOW, config)
    _check_invariants(snap, config, decisions, "rota")
    _no_production_victim_while_lower_tier_option(snap, config, decisions)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.sampled_from(("fifo", "kueue", "slurm")))
def test_baseline_invariants(world: tuple[Snapshot, PolicyConfig], policy: str) -> None:
    snap, config = world
    _check_invariants(snap, config, POLICIES[policy](snap, NOW, config), policy)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_schedule_is_deterministic(world: tuple[Snapshot, PolicyConfig]) -> None:
    """On fresh state (the snapshot brings no layout: the cycle builds its own, and nothing
    outlives a cycle), and with a layout that earlier cycles have warmed, whatever their
    nodes' free GPUs: the same decisions."""
    snap, config = world
    fresh = POLICIES["rota"](snap, NOW, config)
    assert POLICIES["rota"](snap, NOW, config) == fresh
    warm = layout_of(snap.nodes)
    idle = tuple(replace(n, free=tuple(range(n.gpus))) for n in snap.nodes)
    POLICIES["rota"](replace(snap, nodes=idle, running=(), layout=warm), NOW, config)
    assert POLICIES["rota"](replace(snap, layout=warm), NOW, config) == fresh


@SETTINGS
@given(worlds())
def test_rota_refusing_before_the_search_decides_as_the_search(world: tuple[Snapshot, PolicyConfig]) -> None:
    """The planner gives up before searching when every placement would stop a run that
    cannot checkpoint (counted from the lower-tier runs first, then from the runs the search
    would pick); the whole search must come to the same decisions."""
    snap, config = world
    # The generated runs started up to 50,000 s ago: most that cannot checkpoint lose work.
    decisions = POLICIES["rota"](snap, NOW, config)
    with patch.object(preemption, "_too_few_slots", lambda *_: False):
        searched = POLICIES["rota"](snap, NOW, config)
    assert decisions == searched
