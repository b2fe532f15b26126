"""Asking about a few jobs gives the same answers as explaining the whole queue.

Past the exact depth of a flavor, explain reads what is ahead of a job from prefix sums rather
than walking to it; positions, reasons and (up to float rounding) ETAs must not change.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rota.contracts.common import Tier
from rota_policy import (
    POLICIES,
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

NOW = 100_000.0
TEAMS = ("a", "b", "c")
TIERS = (Tier.production, Tier.training, Tier.experiment)


@st.composite
def overloaded(draw: st.DrawFn) -> tuple[Snapshot, PolicyConfig, frozenset[str]]:
    nodes = tuple(NodeState(f"n{i}", "gpu", f"r{i // 2}", 8, ()) for i in range(4))
    running = tuple(
        RunningRun(
            run_id=f"r{i}", job_id=f"rj{i}", team=TEAMS[i % 3], tier=TIERS[i % 3], flavor="gpu",
            placement=(Slot(0, f"n{i}", tuple(range(8))),), gpus=8, started_at=NOW - 1000.0,
            last_checkpoint_at=None, resumable=False, preemptions=0,
            expected_end=NOW + draw(st.integers(0, 20_000)),
        )
        for i in range(4)
    )  # fmt: skip
    n = draw(st.integers(130, 400))
    pending = [
        PendingJob(
            job_id=f"p{i:03d}", team=draw(st.sampled_from(TEAMS)), tier=draw(st.sampled_from(TIERS)),
            flavor=draw(st.sampled_from(("gpu", "gpu", "gpu", "tpu"))), workers=1,
            gpus_per_worker=draw(st.sampled_from((1, 2, 4, 8, 16))),
            submitted_at=float(draw(st.integers(0, 90_000))),
            runtime_estimate_s=draw(st.one_of(st.none(), st.floats(60, 50_000))),
        )
        for i in range(n)
    ]  # fmt: skip
    asked = frozenset(draw(st.lists(st.sampled_from([j.job_id for j in pending]), min_size=1, max_size=6)))
    teams = {t: TeamPolicy(t, limits={"gpu": TeamLimits(quota=8, borrowing_limit=draw(st.sampled_from((None, 8))))})
             for t in TEAMS}  # fmt: skip
    config = PolicyConfig(teams=teams)
    usage = {t: float(draw(st.integers(0, 10**6))) for t in TEAMS}
    return Snapshot(nodes, running, group_pending(pending), usage, runtime_scale=1.5), config, asked


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overloaded(), st.sampled_from(("rota", "fifo", "kueue", "slurm")))
def test_deep_answers_match_the_full_walk(world: tuple[Snapshot, PolicyConfig, frozenset[str]], policy: str) -> None:
    snap, config, asked = world
    full = {e.job_id: e for e in POLICIES[policy](snap, NOW, config).pending}
    some = {e.job_id: e for e in POLICIES[policy](replace(snap, explain=asked), NOW, config).pending}
    assert set(some) == asked & set(full)
    for job_id, e in some.items():
        ref = full[job_id]
        assert (e.position, e.reasons, e.factors) == (ref.position, ref.reasons, ref.factors)
        if ref.eta is None:
            assert e.eta is None
        else:
            assert e.eta is not None and math.isclose(e.eta, ref.eta, rel_tol=1e-9)
