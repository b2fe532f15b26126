"""Builders for the ledger's tests: one small cluster, proposals and run events as envelopes.

The cluster: 16 H100s on nodes h-0..h-3 (4 each), 4 A100s on a-0; A100s may be split by
GPU shares (`shareable`), H100s may not.
- nlp: quota 8 H100, may borrow 4 more, lends at most 4 (so 4 of its quota are never lent);
- vision: quota 4 H100, borrowing unlimited (no limit configured);
- research: no quota at all, may not borrow A100s (borrowing limit 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rota.config import RotaConfig, parse_config
from rota.contracts import Envelope, envelope
from rota.contracts import messages as m
from rota.contracts.job import WorkerPlacement
from rota.ids import new_id
from rota_ledger.domain import Cluster, Request

CONFIG: dict[str, Any] = {
    "cluster": {
        "flavors": [{"name": "h100"}, {"name": "a100", "shareable": True}],
        "node_pools": [
            {"name": "h", "flavor": "h100", "count": 4, "gpus_per_node": 4},
            {"name": "a", "flavor": "a100", "count": 1, "gpus_per_node": 4},
        ],
    },
    "teams": {
        "nlp": {"quota": {"h100": 8}, "borrowing_limit": {"h100": 4},
                "lending_limit": {"h100": 4}, "users": {"alice": {}, "bob": {}}},
        "vision": {"quota": {"h100": 4}, "users": {"carol": {}}},
        "research": {"borrowing_limit": {"a100": 0}, "users": {"dave": {}}},
    },
    "policy": {"fairshare_half_life_s": 3600},
}
HALF_LIFE_S = 3600.0

On = Sequence[tuple[str, Sequence[int]]]
"""Per worker: (node, GPU indices)."""


def ledger_config() -> RotaConfig:
    return parse_config(CONFIG)


def cluster() -> Cluster:
    return Cluster.from_config(ledger_config())


def request(on: On, *, team: str = "nlp", flavor: str = "h100", gpus: int | None = None,
            plan_id: str | None = None) -> Request:
    return Request(team=team, flavor=flavor, plan_id=plan_id,
                   gpus=sum(len(g) for _, g in on) if gpus is None else gpus,
                   workers=[(i, node, list(g)) for i, (node, g) in enumerate(on)])


def placement(on: On, gpu_share: float | None = None) -> list[WorkerPlacement]:
    return [WorkerPlacement(worker=i, node=node, gpus=list(g), gpu_share=gpu_share)
            for i, (node, g) in enumerate(on)]


def proposal(on: On, at: datetime, *, team: str = "nlp", user: str = "alice",
             flavor: str = "h100", queue: str = "training", plan_id: str | None = None,
             proposal_id: str | None = None, run_id: str | None = None,
             job_id: str | None = None, gpus: int | None = None,
             gpu_share: float | None = None) -> Envelope[Any]:
    job_id = job_id or new_id()
    run_id = run_id or new_id()
    data = m.AllocationProposed(
        proposal_id=proposal_id or new_id(), job_id=job_id, run_id=run_id, team=team, user=user,
        queue=queue, flavor=flavor, placement=placement(on, gpu_share),
        gpus=sum(len(g) for _, g in on) if gpus is None else gpus, plan_id=plan_id,
    )
    return envelope(data, source="scheduler", job_id=job_id, run_id=run_id, occurred_at=at)


def run_ended(kind: str, proposed: Envelope[Any], at: datetime, *,
              stop_reason: str = "preempted") -> Envelope[Any]:
    """`RunFinished`, `RunFailed` or `RunStopped` for the run of `proposed`."""
    ids = {"run_id": proposed.data.run_id, "job_id": proposed.data.job_id}
    data: Any
    if kind == "RunFinished":
        data = m.RunFinished(**ids)
    elif kind == "RunFailed":
        data = m.RunFailed(**ids, exit_code=1, error="boom")
    else:
        data = m.RunStopped(**ids, reason=stop_reason, forced=False)
    return envelope(data, source="executor", occurred_at=at, **ids)


def preemption_requested(victims: Sequence[Envelope[Any]], at: datetime, *,
                         plan_id: str | None = None, preemptor_job_id: str | None = None,
                         target: On | None = None, target_share: float | None = None) -> Envelope[Any]:
    fields: dict[str, Any] = {}
    if target is not None:
        fields["target"] = placement(target, target_share)
    data = m.PreemptionRequested.model_validate({
        "plan_id": plan_id or new_id(), "preemptor_job_id": preemptor_job_id or new_id(),
        "preemptor_queue": "production", "preemptor_team": "vision",
        "victims": [{"run_id": v.data.run_id, "job_id": v.data.job_id, "team": v.data.team,
                     "queue": "experiment", "gpus": v.data.gpus, "expected_lost_gpu_seconds": 0,
                     **({"gpu_share": v.data.placement[0].gpu_share} if v.data.placement[0].gpu_share else {})}
                    for v in victims],
        "reason": "PRIORITY", "message": "a production job needs the GPUs",
        "expected_lost_gpu_seconds": 0, **fields,
    })
    return envelope(data, source="scheduler", occurred_at=at)


def preemption_completed(requested: Envelope[Any], at: datetime, *,
                         aborted: bool) -> Envelope[Any]:
    data = m.PreemptionCompleted(
        plan_id=requested.data.plan_id, preemptor_job_id=requested.data.preemptor_job_id,
        aborted=aborted, victims=[],
    )
    return envelope(data, source="preemption", occurred_at=at)
