"""The policy's input built from the scheduler's view (`policy_snapshot`): what GPUs are
free, what runs hold, what waits, and what is in flight. Pure, as the view is.
"""

from __future__ import annotations

from typing import Any

from rota.contracts import Tier
from rota.contracts.lifecycle import Phase
from rota_policy import NodeState, PlanInFlight, Restart, RunningRun, Snapshot
from rota_policy.model.layout import layout_of

from rota_scheduler.records import Allocation, JobRecord, RunningMemo, SnapshotMemo
from rota_scheduler.view import ClusterView


def policy_snapshot(view: ClusterView, now: float, explain: frozenset[str] | None = None) -> Snapshot:
    """The policy's input at `now`, reusing the view's memo; `explain`: the pending jobs to
    explain (None: all)."""
    return snapshot_of(view, now, explain, view.snapshot_memo)


def snapshot_of(view: ClusterView, now: float, explain: frozenset[str] | None,
                memo: SnapshotMemo | None = None) -> Snapshot:
    """The policy's input: nodes with their free GPUs, runs, queues, usage, plans and restarts
    in flight, all from the view.

    `memo`: parts of the last snapshot, reused where nothing they are built from changed, and
    replaced by this snapshot's. Building every running run again each cycle cost about two
    thirds of the snapshot with thousands running, and every node's state most of an idle
    cycle on 2,500 nodes; the result is the same, but for the kept layout
    (`tests/unit/scheduler_service/test_snapshot_memo.py`)."""
    nodes = _nodes(view, memo)
    if memo is not None and memo.layout is None:
        memo.layout = layout_of(nodes)  # the configured nodes' shapes: fixed for the process
    running = (tuple(_running(view, a, now) for a in view.allocations.values() if a.job_id in view.jobs)
               if memo is None else _running_reused(view, now, memo.running))
    pending = view.pending_index.queues()
    half_life = view.config.policy.fairshare_half_life_s
    decay = 0.5 ** (max(0.0, now - view.usage_as_of) / half_life) if view.usage_as_of else 1.0
    plans = tuple(
        PlanInFlight(p.preemptor_job_id, p.victim_run_ids, p.target, p.requested_at)
        for p in view.plans.values()
        if p.target
        and p.preemptor_job_id in view.jobs
        and view.jobs[p.preemptor_job_id].phase is Phase.PENDING
    )
    return Snapshot(
        nodes=nodes,
        running=running,
        pending=pending,
        usage={t: v * decay for t, v in view.usage.items()},
        plans=plans,
        explain=explain,
        runtime_scale=view.runtime_scale.value,
        budget_used=view.budget_meter.used(now) if view.budget_meter.periods else None,
        restarts=tuple(
            Restart(job_id, r.run_id, r.target, r.requested_at, r.grow)
            for job_id, r in view.restarts.items() if job_id in view.jobs
        ),
        layout=memo.layout if memo is not None else None,
        unrunnable=view.executors.unrunnable(now, pending, view.jobs),
    )


def _nodes(view: ClusterView, memo: SnapshotMemo | None) -> tuple[NodeState, ...]:
    """Every node with its free GPUs and its shared GPUs' room: the memo's when the GPUs
    held and the nodes withdrawn are the same as when it was built, else the memo's state of
    each node whose own are."""
    held: dict[str, set[int]] = {}
    shared: dict[str, dict[int, int]] = {}
    # node → GPU index → quarters that GPU shares hold of it (DECISIONS 66).
    for allocation in view.allocations.values():
        for slot in allocation.placement:
            held.setdefault(slot.node, set()).update(slot.gpus)
            if slot.share:
                on = shared.setdefault(slot.node, {})
                for gpu in slot.gpus:
                    on[gpu] = on.get(gpu, 0) + slot.share
    # A drained node offers nothing either (DECISIONS 100): to the policy it is withdrawn.
    closed = view.withdrawn.keys() | view.drains.keys()
    built_from = (held, shared, frozenset(closed))
    if memo is not None and memo.nodes_from == built_from:
        return memo.nodes
    kept = memo.node_states if memo is not None else {}
    states: dict[str, tuple[tuple[Any, ...], NodeState]] = {}
    for n in view.config.expanded_nodes():
        inputs = (n.name in closed, held.get(n.name, _NONE), shared.get(n.name, _NO_SHARES))
        before = kept.get(n.name)
        if before is not None and before[0] == inputs:
            states[n.name] = before
            continue
        withdrawn, on_node, sharing = inputs
        state = NodeState(
            n.name,
            n.flavor,
            n.rack,
            n.gpus,
            # A withdrawn node offers nothing: its GPUs are neither free nor held.
            () if withdrawn else tuple(i for i in range(n.gpus) if i not in on_node),
            view.config.node_levels(n),
            # A withdrawn node's shared GPUs have no room either.
            () if withdrawn else tuple(sorted(sharing.items())),
        )
        states[n.name] = ((withdrawn, frozenset(on_node), dict(sharing)), state)
    nodes = tuple(state for _, state in states.values())
    if memo is not None:
        memo.nodes_from, memo.nodes, memo.node_states = built_from, nodes, states
    return nodes


_NONE: frozenset[int] = frozenset()
_NO_SHARES: dict[int, int] = {}


def running_runs(view: ClusterView, now: float) -> tuple[RunningRun, ...]:
    """Every run holding GPUs, built afresh (no memo: safe beside a cycle's worker thread)."""
    return tuple(_running(view, a, now) for a in list(view.allocations.values())
                 if a.job_id in view.jobs)


def _running_reused(view: ClusterView, now: float, memo: RunningMemo) -> tuple[RunningRun, ...]:
    fresh: RunningMemo = {}
    for allocation in view.allocations.values():
        job = view.jobs.get(allocation.job_id)
        if job is None:
            continue
        inputs = _inputs(job, allocation, now)
        kept = memo.get(allocation.run_id)
        run = kept[1] if kept is not None and kept[0] == inputs else _running(view, allocation, now)
        fresh[allocation.run_id] = (inputs, run)
    memo.clear()
    memo.update(fresh)
    return tuple(run for _, run in fresh.values())


def _inputs(job: JobRecord, allocation: Allocation, now: float) -> tuple[Any, ...]:
    """Everything `_running` reads that can change (a job's spec never does)."""
    started = job.started_at if job.run_id == allocation.run_id else None
    return (job.job_id, started if started is not None else now, job.last_checkpoint_at,
            job.preemptions, allocation.placement, allocation.flavor, allocation.borrowed_gpus)


def _running(view: ClusterView, allocation: Allocation, now: float) -> RunningRun:
    job = view.jobs[allocation.job_id]
    spec = job.spec
    started = job.started_at if job.run_id == allocation.run_id else None
    # A run proposed or granted but not yet started counts as starting now: it is inside
    # its minimum runtime, so no plan picks it as a victim before it has even begun.
    start = started if started is not None else now
    runtime = spec.declared_runtime_s
    return RunningRun(
        run_id=allocation.run_id,
        job_id=job.job_id,
        team=spec.team,
        tier=Tier(spec.queue),
        flavor=allocation.flavor or spec.flavor,
        placement=allocation.placement,
        # A share holds no whole GPU: stopping it frees none (RunningRun.share).
        gpus=0 if spec.share else sum(len(slot.gpus) for slot in allocation.placement),
        started_at=start,
        last_checkpoint_at=job.last_checkpoint_at if started is not None else None,
        resumable=spec.resumable,
        preemptions=job.preemptions,
        borrowed_gpus=allocation.borrowed_gpus,
        expected_end=(start + runtime) if runtime else None,
        checkpoint_interval_s=spec.sim.checkpoint_interval_s if spec.sim else None,
        share=spec.share,
        # An elastic gang's range: the policy may shrink it for a preemptor, or grow it.
        workers_range=(spec.workers_min, spec.workers)
        if spec.workers_min is not None and spec.workers_min < spec.workers else None,
    )

