"""Restarts at another size in flight (DECISIONS 81): phase 1's holds for a shrunk victim or a
growing run, beside the preemption plans' (`engine._resolve_plans`).

A live run cannot restart at the instant it stops, as the replay's does: its job waits again
between the run's stop and its next cycle. The GPUs it restarts on (those it kept, or its own
plus the added ones) are held for it meanwhile, so that nobody else takes them, and it is
admitted on exactly them, as a preemptor is on its plan's target. A GPU of the target that is
neither free nor the run's own was taken by someone else: the restart is abandoned, and the
job starts wherever the ladder admits it, as any requeued job does.
"""

from __future__ import annotations

from rota_policy.admission.placement import ClusterState
from rota_policy.cycle.plans import PlanHold
from rota_policy.cycle.state import Cycle
from rota_policy.model.snapshot import Restart, RunningRun

__all__ = ["resolve_restarts", "restart_message"]


def resolve_restarts(cy: Cycle) -> None:
    """Hold each restart's free GPUs; a waiting job whose target is all free is planned on it."""
    restarts = cy.snapshot.restarts
    if not restarts:
        return
    wanted = {r.job_id for r in restarts}
    owner = {job_id: q for q in cy.snapshot.pending for job_id in wanted & q.ids()}
    runs = {r.run_id: r for r in cy.snapshot.running}
    for restart in restarts:
        queue, run = owner.get(restart.job_id), runs.get(restart.run_id)
        if (queue is None and run is None) or not restart.target or restart.job_id in cy.in_flight.planned:
            continue  # over (the caller drops it), or a plan of its own already holds GPUs
        holds = _holds(cy.capacity.state, restart, run)
        if holds is None:
            cy.outcome.abandoned.append(restart.job_id)
            continue
        complete = not any(gpus is None for _, gpus in holds)
        held = tuple((node, gpus) for node, gpus in holds if gpus)
        for node, gpus in held:
            cy.capacity.state.take_exact(node, gpus)
        layout = cy.capacity.state.layout
        flavor = layout.node_flavor[layout.index[restart.target[0].node]]
        team = queue.team if queue is not None else run.team if run is not None else ""
        # The run's own GPUs count in its team's use while it holds them: only the rest adds.
        extra = max(0, sum(len(s.gpus) for s in restart.target) - (run.gpus if run else 0))
        cy.capacity.quota.add(team, flavor, extra)
        cy.in_flight.plan_holds[restart.job_id] = PlanHold(team, flavor, extra, held)
        if run is not None:
            cy.capacity.taken.add(run.run_id)  # no plan or grow picks a run that is restarting
        if queue is not None:
            cy.in_flight.restarting[restart.job_id] = restart
            cy.in_flight.planned[restart.job_id] = restart.target if complete else None
            asked = cy.now if restart.requested_at is None else restart.requested_at
            cy.in_flight.plan_ready_at[restart.job_id] = max(cy.now, asked + cy.config.checkpoint_save_s)


def _holds(
    state: ClusterState, restart: Restart, run: RunningRun | None
) -> list[tuple[int, tuple[int, ...] | None]] | None:
    """Per node of the target, its free GPUs to hold, or None where some GPU is still the
    run's; None if some GPU is neither (taken by another run, or its node withdrawn)."""
    own = {(s.node, g) for s in run.placement for g in s.gpus} if run is not None else set()
    out: list[tuple[int, tuple[int, ...] | None]] = []
    for slot in restart.target:
        node = state.layout.index.get(slot.node)
        if node is None:
            return None
        free = set(state.free[node])
        if any(g not in free and (slot.node, g) not in own for g in slot.gpus):
            return None
        out.append((node, tuple(g for g in slot.gpus if g in free)))
        if any(g not in free for g in slot.gpus):
            out.append((node, None))
    return out


def restart_message(restart: Restart) -> str:
    """Why a restarting job waits: its run is still saving and stopping."""
    workers = len(restart.target)
    if restart.grow:
        return (f"growing to {workers} workers: its run saves a checkpoint and stops, then it"
                " restarts on its GPUs and the ones held for it")
    return (f"shrunk to {workers} workers for a preemptor: its run saves a checkpoint and stops,"
            " then it restarts on the GPUs it kept, held for it")
