"""Properties of GPU shares over random worlds and several rounds (DECISIONS 66-68).

- the shares on one GPU never exceed 1 (four quarters), and no whole-GPU placement ever takes a
  GPU that a share holds, round after round as admitted jobs run and runs end;
- with shares as victims (DECISIONS 84), the same holds round after round as plans are made,
  their victims stop (a share frees only its quarters) and preemptors start on their targets;
- the walk's shortcuts decide as the reference walk when some pending jobs are shares, and when
  running shares are victims.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rota_policy import POLICIES, PendingJob, PlanInFlight, PolicyConfig, RunningRun, Slot, Snapshot
from rota_policy.core import ROTA_RULES
from rota_policy.cycle.engine import run_cycle
from rota_policy.cycle.fast.shortcuts import Shortcuts
from rota_policy.cycle.walkstate import FastPath

from tests.unit.policy.builders import World, gpu_jobs, team_config

NOW = 50_000.0
TEAMS = ("a", "b")


def _pending(draw: st.DrawFn, prefix: str, at: float) -> list[PendingJob]:
    jobs: list[PendingJob] = []
    for i in range(draw(st.integers(1, 12))):
        share = draw(st.sampled_from((0, 1, 2, 3, 2, 1)))
        jobs += gpu_jobs(
            draw(st.sampled_from(TEAMS)), draw(st.sampled_from(("production", "training", "experiment"))),
            gpus=draw(st.sampled_from((1, 2, 4))), share=share,
            submitted=at + draw(st.integers(0, 600)),
            runtime=draw(st.one_of(st.none(), st.sampled_from((600.0, 50_000.0)))),
            name=f"{prefix}{i:02d}",
        )  # fmt: skip
    return jobs


@st.composite
def worlds(draw: st.DrawFn) -> tuple[World, list[PendingJob], PolicyConfig]:
    world = World(nodes=draw(st.integers(1, 3)), gpus=4)
    for node in range(world.nodes):
        for _ in range(draw(st.integers(0, 3))):
            share = draw(st.sampled_from((0, 1, 2, 3)))
            tier = draw(st.sampled_from(("experiment", "experiment", "training")))
            if share == 0 and world.free[node]:
                world.run(draw(st.sampled_from(TEAMS)), tier, node=node, gpus=1,
                          started=NOW - 4000, end=NOW + draw(st.integers(0, 20_000)))
            elif share and (world.free[node] or any(u + share <= 4 for u in world.parts.get(node, {}).values())):
                world.run(draw(st.sampled_from(TEAMS)), tier, node=node, share=share,
                          started=NOW - 4000, end=NOW + draw(st.integers(0, 20_000)))
    quotas = {t: {"gpu": draw(st.sampled_from((1, 2, 4, 8)))} for t in TEAMS}
    borrowing = draw(st.sampled_from(({}, dict.fromkeys(TEAMS, 0))))
    config = team_config(flavors=quotas, borrowing=borrowing, shareable=frozenset({"gpu"}),
                         max_preemption_attempts=draw(st.sampled_from((0, 8))))
    return world, _pending(draw, "p", 0.0), config


def _check_books(world: World, running: tuple[RunningRun, ...]) -> None:
    quarters: dict[tuple[str, int], int] = {}
    whole: set[tuple[str, int]] = set()
    for run in running:
        for slot in run.placement:
            for gpu in slot.gpus:
                key = (slot.node, gpu)
                if slot.share:
                    quarters[key] = quarters.get(key, 0) + slot.share
                else:
                    assert key not in whole, f"GPU {key} booked whole twice"
                    whole.add(key)
    assert all(q <= 4 for q in quarters.values()), quarters
    assert not whole & set(quarters), whole & set(quarters)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.sampled_from(sorted(POLICIES)), st.integers(0, 2**16))
def test_shares_on_one_gpu_never_exceed_one(
    world_of: tuple[World, list[PendingJob], PolicyConfig], policy: str, seed: int
) -> None:
    world, pending, config = world_of
    now = NOW
    for step in range(4):
        snap = world.snapshot(pending)
        d = POLICIES[policy](snap, now, config)
        jobs = {j.job_id: j for j in pending}
        for a in d.admissions:
            job = jobs.pop(a.job_id)
            slot = a.placement[0]
            if job.share:
                assert slot.share == job.share and len(slot.gpus) == 1
                world.run(job.team, job.tier.value, node=int(slot.node[1:]), share=job.share, gpu=slot.gpus[0],
                          started=now, end=now + 3600.0, run_id=f"r-{a.job_id}")
            else:
                assert all(s.share == 0 for s in a.placement)
                for s in a.placement:  # booked exactly where the policy placed it
                    for g in s.gpus:
                        world.free[int(s.node[1:])].remove(g)
                world.runs.append(RunningRun(
                    f"r-{a.job_id}", a.job_id, job.team, job.tier, a.flavor, a.placement, job.gpus, now, None,
                    False, 0, expected_end=now + 3600.0))
        _check_books(world, tuple(world.runs))
        pending = list(jobs.values())
        # Some runs end (chosen by the seed), freeing their shares or GPUs.
        for k, run in enumerate(list(world.runs)):
            if (seed >> ((k + step) % 16)) & 1:
                world.finish(run)
        now += 600.0


def _start(world: World, job: PendingJob, placement: tuple[Slot, ...], flavor: str, now: float) -> None:
    """Book an admitted job where the policy placed it, as the caller does."""
    slot = placement[0]
    if job.share:
        assert slot.share == job.share and len(slot.gpus) == 1 and len(placement) == 1
        world.run(job.team, job.tier.value, node=int(slot.node[1:]), share=job.share, gpu=slot.gpus[0],
                  started=now, end=now + 3600.0, run_id=f"r-{job.job_id}")
        return
    assert all(s.share == 0 for s in placement)
    for s in placement:
        for g in s.gpus:
            world.free[int(s.node[1:])].remove(g)  # raises if the GPU is not free: booked twice
    world.runs.append(RunningRun(f"r-{job.job_id}", job.job_id, job.team, job.tier, flavor, placement,
                                 job.gpus, now, now, True, 0, expected_end=now + 3600.0))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.integers(0, 2**16))
def test_shares_never_exceed_one_as_plans_stop_shares(
    world_of: tuple[World, list[PendingJob], PolicyConfig], seed: int
) -> None:
    """Rota's rounds with plans carried out: each plan's victims stop before the next round (a
    share frees only its quarters), and its preemptor starts on its target once all is free."""
    world, pending, config = world_of
    config = config.with_overrides(max_preemption_attempts=8)
    now = NOW
    for step in range(5):
        d = POLICIES["rota"](world.snapshot(pending), now, config)
        jobs = {j.job_id: j for j in pending}
        done = set(d.abandoned_plans) | {a.job_id for a in d.admissions}
        world.plans = [p for p in world.plans if p.preemptor_job_id not in done]
        for a in d.admissions:
            _start(world, jobs.pop(a.job_id), a.placement, a.flavor, now)
        _check_books(world, tuple(world.runs))
        for plan in d.plans:
            world.plans.append(PlanInFlight(plan.preemptor_job_id, tuple(v.run_id for v in plan.victims),
                                            plan.target, now))
            for victim in plan.victims:
                run = next(r for r in world.runs if r.run_id == victim.run_id)
                world.finish(run)
                assert victim.share == run.share and victim.gpus == run.gpus
        pending = list(jobs.values())
        for k, run in enumerate(list(world.runs)):
            if (seed >> ((k + step) % 16)) & 1 and not run.run_id.startswith("r-"):
                world.finish(run)
        now += 600.0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_shortcuts_decide_as_the_reference_walk_with_shares(
    world_of: tuple[World, list[PendingJob], PolicyConfig],
) -> None:
    world, pending, config = world_of
    snap: Snapshot = world.snapshot(pending)
    fast = run_cycle(snap, NOW, config, ROTA_RULES)
    reference = run_cycle(snap, NOW, config, replace(ROTA_RULES, pass_over=False))
    assert (fast.admissions, fast.plans) == (reference.admissions, reference.plans)
    assert fast.pending == reference.pending


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.sampled_from(sorted(POLICIES)))
def test_dropping_hopeless_queues_with_shares_changes_no_decision(
    world_of: tuple[World, list[PendingJob], PolicyConfig], policy: str
) -> None:
    """`Shortcuts.hopeless` keeps a queue with a share while some GPU of its flavor is shared
    with room: without the shortcut, the walk decides the same."""
    world, pending, config = world_of
    snap = world.snapshot(pending)
    fast = POLICIES[policy](snap, NOW, config)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Shortcuts, "hopeless", FastPath.hopeless)  # drops no lane
        reference = POLICIES[policy](snap, NOW, config)
    assert (fast.admissions, fast.plans) == (reference.admissions, reference.plans)
