"""Node drains in the scheduler (DECISIONS 100): the drain plans a cycle sends, and the nodes'
states that `rota cluster nodes` reads. Pure, as `actions` is: the view and the policy's
snapshot in, messages and rows out.

A drain plan is a `PreemptionRequested` with the reason `drain`, one victim, and `node` set:
the preemption coordinator runs it as any other (notice, checkpoint acknowledgement or forced
stop at the grace's end), its stop says `drained`, and no GPU is held for it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rota.contracts import messages as m
from rota.contracts.job import share_fraction
from rota.contracts.lifecycle import Phase
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.ids import new_id, stable_id
from rota_policy import RunningRun, Snapshot
from rota_policy.preemption.drain import DRAIN_REASON, DrainStop, drain_stops, eviction_stops, expected_end

from rota_scheduler.actions import Actions, DecisionRecord, Outgoing
from rota_scheduler.view import ClusterView


def stopping_runs(view: ClusterView) -> frozenset[str]:
    """Runs already on their way out: a drain's victims, other plans' victims, cancelled runs."""
    out = set(view.drain_victims)
    for plan in view.plans.values():
        out.update(plan.victim_run_ids)
    out.update(j.run_id for j in view.jobs.values() if j.stop_requested and j.run_id)
    return frozenset(out)


def drain_messages(view: ClusterView, snapshot: Snapshot, now: float, *,
                   default_runtime_s: float, new_uuid: Callable[[], str]
                   ) -> list[tuple[m.PreemptionRequested, DrainStop]]:
    """One drain plan per run to stop this cycle."""
    stopping = stopping_runs(view)
    stops = drain_stops(snapshot.running, view.drains, now, runtime_scale=snapshot.runtime_scale,
                        default_runtime_s=default_runtime_s, stopping=stopping)
    stopping = stopping | {s.run.run_id for s in stops}
    stops += eviction_stops(snapshot.running, view.evictions, stopping=stopping)
    out = []
    for stop in stops:
        run, job = stop.run, view.jobs.get(stop.run.job_id)
        if job is None or job.run_id != run.run_id or job.phase is not Phase.RUNNING:
            continue  # proposed or granted, not started: stopped once it runs
        elapsed = max(0.0, now - (run.last_checkpoint(now) or run.started_at))
        victim = m.Victim(
            run_id=run.run_id, job_id=run.job_id, team=run.team, queue=run.tier, gpus=run.gpus,
            # What a forced stop would lose: the work since its last checkpoint.
            expected_lost_gpu_seconds=elapsed * (run.demand if run.resumable else run.gpus or 1),
            job_name=job.spec.name, user=job.spec.user, resumable=run.resumable,
            last_checkpoint_uri=job.last_checkpoint_uri, gpu_share=share_fraction(run.share),
        )
        out.append((m.PreemptionRequested(
            plan_id=new_uuid(),
            # No job is the preemptor: the drain is, under an id of its own per node and run.
            preemptor_job_id=stable_id(f"drain:{stop.node}:{run.run_id}"),
            preemptor_queue=run.tier, preemptor_team=None, victims=[victim],
            reason=DRAIN_REASON, message=stop.why[:1024],
            expected_lost_gpu_seconds=victim.expected_lost_gpu_seconds, node=stop.node,
        ), stop))
    return out


def add_drain_actions(view: ClusterView, snapshot: Snapshot, actions: Actions, now: float, *,
                      default_runtime_s: float, new_uuid: Callable[[], str] = new_id) -> None:
    """This cycle's drain plans, each with its decision record (`tracing.paired`), under the
    victim's job: the plan is about that job, whose trace and timeline show it."""
    for message, stop in drain_messages(view, snapshot, now, default_runtime_s=default_runtime_s,
                                        new_uuid=new_uuid):
        victim = message.victims[0]
        actions.outgoing.append(Outgoing(message, EVENT_SUBJECTS["PreemptionRequested"],
                                         STREAM_EVT, victim.job_id))
        actions.records.append(DecisionRecord(victim.job_id, "preempt", DRAIN_REASON, {}, {
            "victims": [victim.run_id], "node": stop.node, "message": message.message,
            "expected_lost_gpu_s": victim.expected_lost_gpu_seconds}))


def node_states(view: ClusterView, running: tuple[RunningRun, ...], now: float, *,
                default_runtime_s: float, runtime_scale: float,
                only: str | None = None) -> list[dict[str, Any]]:
    """Each node of rota.yaml with its state and its runs, for `rota cluster nodes`:
    `draining` (until `deadline`) while a drained node still holds runs, then `drained`;
    `lost` (the executor withdrew it: NotReady, gone; `reason` says why) or `ready`."""
    on: dict[str, list[RunningRun]] = {}
    for run in running:
        for name in dict.fromkeys(s.node for s in run.placement):
            on.setdefault(name, []).append(run)
    out = []
    for node in view.config.expanded_nodes():
        if only is not None and node.name != only:
            continue
        runs = on.get(node.name, [])
        drain = view.drains.get(node.name)
        state = ("drained" if drain and not runs else "draining" if drain
                 else "lost" if node.name in view.withdrawn else "ready")
        out.append({
            "node": node.name, "flavor": node.flavor, "gpus": node.gpus, "state": state,
            "deadline": _iso(drain.deadline) if drain else None,
            "reason": drain.reason if drain else view.withdrawn.get(node.name),
            "runs": [{
                "run_id": r.run_id, "job_id": r.job_id, "team": r.team, "queue": r.tier.value,
                "gpus": sum(len(s.gpus) for s in r.placement if s.node == node.name),
                "expected_end": _iso(expected_end(r, runtime_scale=runtime_scale,
                                                  default_runtime_s=default_runtime_s)),
                "draining": r.run_id in view.drain_victims,
            } for r in runs],
        })
    return out


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat()
