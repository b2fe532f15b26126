"""One scheduling cycle, in numbered phases (as Kueue and Armada write theirs).

    1. snapshot   working copies: nodes, quota usage, plans in flight and the GPUs they hold
    2. nominate   walk pending jobs in policy order (strict tiers, then score)
    3. admit      quota, then reservation, then best-fit gang placement
    4. preempt    for a blocked job: victims whose stop really lets it fit
    5. reserve    backfill reservation for a blocked job that could not preempt
    6. explain    reasons, ETA and score for every pending job asked about; queue diagnoses

A job that no running executor can run (`Snapshot.unrunnable`) is taken out of its queue before
phase 1 and explained apart (`explain.executors`): it waits as if not submitted yet.

`Rules` says which of these a policy uses; Rota and the three baselines share the engine so that
a comparison measures policy, not implementation. Phase 1 is here, phases 2-5 in `walk` (the
reference, with its shortcuts in `cycle.fast` behind the seam `walkstate.FastPath`), phase 6 in
`explain.reasons`; phases 3 and 6 ask one admission ladder (`admission.ladder`); `state` holds
what they share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from rota_policy.cycle.fast.shortcuts import Shortcuts
from rota_policy.cycle.grow import grows
from rota_policy.cycle.plans import PlanHold, hold
from rota_policy.cycle.restarts import resolve_restarts
from rota_policy.cycle.state import Cycle, Planner, Rules
from rota_policy.cycle.walk import walk
from rota_policy.cycle.walkstate import REFERENCE, FastPath
from rota_policy.explain.executors import held_explanations
from rota_policy.explain.reasons import explain, score_factors
from rota_policy.model.config import PolicyConfig
from rota_policy.model.decisions import Decisions
from rota_policy.model.snapshot import QUARTERS, NoExecutor, PendingQueue, Slot, Snapshot

__all__ = ["Cycle", "Planner", "Rules", "run_cycle"]


# ---------------------------------------------------------------- phase 1: plans in flight


def _resolve_plans(cy: Cycle) -> None:
    plans = cy.snapshot.plans
    if not plans:
        return
    # A plan's preemptor is still pending if some queue holds it; its queue gives its team.
    wanted = {plan.preemptor_job_id for plan in plans}
    owner = {job_id: q for q in cy.snapshot.pending for job_id in wanted & q.ids()}
    runs = {r.run_id: r for r in cy.snapshot.running}
    state = cy.capacity.state
    for plan in plans:
        queue = owner.get(plan.preemptor_job_id)
        if queue is None:
            continue
        victim_gpus: set[tuple[str, int]] = set()
        for run_id in plan.victim_run_ids:
            run = runs.get(run_id)
            if run is not None:
                cy.capacity.taken.add(run_id)
                victim_gpus.update((s.node, g) for s in run.placement for g in s.gpus)
        complete, broken = _target_state(cy, plan.target, victim_gpus)
        if broken:
            cy.outcome.abandoned.append(plan.preemptor_job_id)
            continue
        share = plan.target[0].share if len(plan.target) == 1 else 0
        if complete and share:  # its quarters, on a GPU free or with room: booked now
            slot = plan.target[0]
            state.book_share(state.layout.index[slot.node], slot.gpus[0], share)
            holds: tuple[tuple[int, tuple[int, ...]], ...] = ()
        else:
            holds = hold(state, plan.target)
        cy.in_flight.planned[plan.preemptor_job_id] = plan.target if complete else None
        asked = cy.now if plan.requested_at is None else plan.requested_at
        cy.in_flight.plan_ready_at[plan.preemptor_job_id] = max(cy.now, asked + cy.config.checkpoint_save_s)
        gpus = sum(s.share / QUARTERS if s.share else len(s.gpus) for s in plan.target)
        flavor = state.layout.node_flavor[state.layout.index[plan.target[0].node]] if plan.target else ""
        cy.capacity.quota.add(queue.team, flavor, gpus)
        cy.in_flight.plan_holds[plan.preemptor_job_id] = PlanHold(queue.team, flavor, gpus, holds)


def _target_state(
    cy: Cycle, target: tuple[Slot, ...], victim_gpus: set[tuple[str, int]]
) -> tuple[bool, bool]:
    """Whether every GPU of a plan's target is free (a share's: free or with room for its
    quarters), and whether one is held by a run that is not its victim (the plan is broken)."""
    state = cy.capacity.state
    complete = True
    for slot in target:
        node = state.layout.index.get(slot.node)
        if node is None:
            return False, True
        free = set(state.free[node])
        shared = state.parts.get(node, {})
        for g in slot.gpus:
            if g in free or (slot.share and g in shared and shared[g] + slot.share <= QUARTERS):
                continue
            complete = False
            if (slot.node, g) not in victim_gpus:
                return False, True
    return complete, False


def _prepared(snapshot: Snapshot, now: float, config: PolicyConfig, rules: Rules) -> Cycle:
    cy = Cycle(snapshot, now, config, rules)
    _resolve_plans(cy)
    resolve_restarts(cy)
    return cy


def _fast_path(rules: Rules, shortcuts: bool) -> FastPath:
    return Shortcuts(rules.pass_over) if shortcuts else REFERENCE


def _without(snapshot: Snapshot, held: Mapping[str, NoExecutor]) -> Snapshot:
    """The snapshot with the held jobs out of their queues and of the jobs to explain."""
    queues: list[PendingQueue] = []
    for queue in snapshot.pending:
        if held.keys().isdisjoint(queue.ids()):
            queues.append(queue)
            continue
        jobs = tuple(j for j in queue.jobs if j.job_id not in held)
        if jobs:
            queues.append(PendingQueue(queue.tier, queue.team, queue.flavor, jobs))
    wanted = snapshot.explain
    return replace(snapshot, pending=tuple(queues), unrunnable=None,
                   explain=None if wanted is None else wanted - held.keys())


def run_cycle(
    snapshot: Snapshot, now: float, config: PolicyConfig, rules: Rules, shortcuts: bool = True
) -> Decisions:
    """One cycle under `rules`: walked with the shortcuts the rules allow (`cycle.fast`), or
    with none (`shortcuts=False`: the reference walk, which the tests compare with)."""
    held = snapshot.unrunnable
    if not held:
        return _run(snapshot, now, config, rules, shortcuts)[0]
    decisions, cy = _run(_without(snapshot, held), now, config, rules, shortcuts)
    waiting = held_explanations(snapshot.pending, held, snapshot.explain,
                                lambda job: score_factors(cy, job))
    return replace(decisions, pending=decisions.pending + waiting)


def _run(
    snapshot: Snapshot, now: float, config: PolicyConfig, rules: Rules, shortcuts: bool
) -> tuple[Decisions, Cycle]:
    cy = _prepared(snapshot, now, config, rules)
    if not walk(cy, _fast_path(rules, shortcuts)):
        # A job it passed over would have searched for victims: decide again, one job at a time.
        rules = replace(rules, pass_over=False)
        cy = _prepared(snapshot, now, config, rules)
        walk(cy, _fast_path(rules, shortcuts))
    pending, diagnoses = explain(cy)
    grown = grows(cy) if rules.grow else ()
    return Decisions(
        admissions=tuple(cy.outcome.admissions),
        plans=tuple(cy.outcome.plans),
        pending=pending,
        diagnoses=diagnoses,
        abandoned_plans=tuple(cy.outcome.abandoned),
        deferred=tuple(sorted(cy.outcome.deferred.items())),
        grows=grown,
    ), cy
