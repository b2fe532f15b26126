"""Growing an elastic run back towards its max on idle GPUs (DECISIONS 74).

After a cycle's admissions and plans, an elastic run below its max may grow when GPUs of its
flavor are idle and nothing waits for them: no pending job that accepts the flavor is left
waiting (a job that waits anywhere might want them, now or at its reservation), no plan is in
flight on it. It grows to the largest size up to its max whose added workers fit the free GPUs
(best-fit, no topology level asked) and keep its team within what quota allows. The run saves
a checkpoint on request and restarts at the larger size on its GPUs plus the added ones, which
are held for it meanwhile: a grow is a checkpoint-triggered restart, not a preemption.

A run grows only if it has run `PolicyConfig.grow_after_s` (30 minutes unless rota.yaml says
`policy.grow_after_s`) since it last started, so that a cluster that empties and fills again
does not restart it at every cycle.
"""

from __future__ import annotations

from rota.contracts.job import RackAffinity

from rota_policy.admission.placement import fit_on_counts
from rota_policy.cycle.state import Cycle
from rota_policy.model.decisions import Grow
from rota_policy.model.snapshot import RunningRun, Slot
from rota_policy.model.topology import need_of

__all__ = ["grows"]

_NO_LEVEL = need_of(RackAffinity.none, None)


def _waited_on(cy: Cycle) -> set[str]:
    """The flavors some pending job still waits for after this cycle, or a plan holds."""
    admitted = {a.job_id for a in cy.outcome.admissions}
    flavors: set[str] = set()
    for queue in cy.snapshot.pending:
        # More jobs than admissions: one waits, without building the queue's id set.
        if len(queue.jobs) > len(admitted) or len(queue.jobs) > len(admitted & queue.ids()):
            flavors.add(queue.flavor)
            flavors.update(queue.fallback or ())
    for hold in cy.in_flight.plan_holds.values():
        flavors.add(hold.flavor)
    return flavors


def grows(cy: Cycle) -> tuple[Grow, ...]:
    """The elastic runs that grow this cycle, each with the workers it adds. Takes their GPUs
    from the cycle's state and adds them to their teams' quota use."""
    state = cy.capacity.state
    idle = {f for f, free in state.free_total.items() if free > 0}
    if idle:
        idle -= _waited_on(cy)
    if not idle:
        return ()
    candidates = [
        run for run in cy.snapshot.running
        if run.workers_range is not None and run.flavor in idle and run.resumable
        and len(run.placement) < run.workers_range[1] and run.run_id not in cy.capacity.taken
        and cy.now - run.started_at >= cy.config.grow_after_s
    ]
    out = []
    for run in sorted(candidates, key=lambda r: (r.tier.rank, r.started_at, r.run_id)):
        if run.flavor in idle:
            grown = _grow(cy, run)
            if grown is not None:
                out.append(grown)
    return tuple(out)


def _grow(cy: Cycle, run: RunningRun) -> Grow | None:
    state, layout = cy.capacity.state, cy.capacity.state.layout
    assert run.workers_range is not None
    per_worker = len(run.placement[0].gpus)
    now_workers = len(run.placement)
    free = state.free_total.get(run.flavor, 0)
    nodes = layout.flavor_nodes.get(run.flavor, [])
    for extra in range(min(run.workers_range[1] - now_workers, free // per_worker), 0, -1):
        if cy.rules.quotas and not cy.capacity.quota.allows(run.team, run.flavor, extra * per_worker):
            continue
        fit = fit_on_counts(state.counts(), nodes, layout, extra, per_worker, _NO_LEVEL)
        if fit is None:
            continue
        added = tuple(
            Slot(now_workers + slot.worker, slot.node, slot.gpus) for slot in state.allocate(fit)
        )
        cy.capacity.quota.add(run.team, run.flavor, extra * per_worker)
        return Grow(run.run_id, run.job_id, now_workers + extra, added)
    return None
