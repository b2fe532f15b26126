"""Rota's scheduling policy: pure functions from a snapshot to decisions.

`schedule(snapshot, now, config)` is Rota's policy; `POLICIES` maps every policy name the
simulator can replay (rota and the baselines fifo, kueue, slurm) to a function of the same shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from rota_policy.baselines import schedule_fifo, schedule_kueue, schedule_slurm
from rota_policy.core import schedule
from rota_policy.model.config import (
    BudgetLimit,
    PolicyConfig,
    ScoreWeights,
    TeamLimits,
    TeamPolicy,
    TierPolicy,
    gangs_of,
    policy_config_from,
)
from rota_policy.model.decisions import (
    Admission,
    Decisions,
    Diagnosis,
    PendingExplanation,
    PreemptionPlan,
    Reason,
    ScoreBreakdown,
    VictimChoice,
)
from rota_policy.model.snapshot import (
    NodeState,
    NoExecutor,
    PendingJob,
    PendingQueue,
    PlanInFlight,
    Restart,
    RunningRun,
    Slot,
    Snapshot,
    group_pending,
)
from rota_policy.model.topology import TopologyNeed, job_topology

SchedulePolicy = Callable[[Snapshot, float, PolicyConfig], Decisions]

POLICIES: Mapping[str, SchedulePolicy] = MappingProxyType(
    {"rota": schedule, "fifo": schedule_fifo, "kueue": schedule_kueue, "slurm": schedule_slurm}
)

__all__ = [
    "POLICIES",
    "Admission",
    "BudgetLimit",
    "Decisions",
    "Diagnosis",
    "NoExecutor",
    "NodeState",
    "PendingExplanation",
    "PendingJob",
    "PendingQueue",
    "PlanInFlight",
    "PolicyConfig",
    "PreemptionPlan",
    "Reason",
    "Restart",
    "RunningRun",
    "SchedulePolicy",
    "ScoreBreakdown",
    "ScoreWeights",
    "Slot",
    "Snapshot",
    "TeamLimits",
    "TeamPolicy",
    "TierPolicy",
    "TopologyNeed",
    "VictimChoice",
    "gangs_of",
    "group_pending",
    "job_topology",
    "policy_config_from",
    "schedule",
]
