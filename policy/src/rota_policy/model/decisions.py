"""The policy's output (`Decisions`): admissions, preemption plans, and why each pending job
waits. Plain frozen dataclasses, as the input is (`model`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rota.contracts.common import Tier
from rota.contracts.messages import WaitReasonCode

from rota_policy.model.snapshot import Slot

__all__ = [
    "Admission",
    "Decisions",
    "Diagnosis",
    "Grow",
    "PendingExplanation",
    "PreemptionPlan",
    "Reason",
    "ScoreBreakdown",
    "VictimChoice",
]

DetailValue = int | float | str


@dataclass(frozen=True, slots=True)
class Admission:
    job_id: str
    placement: tuple[Slot, ...]
    borrowed_gpus: float = 0
    via_plan: bool = False
    """True when the GPUs were freed by this job's own preemption plan."""
    flavor: str = ""
    """The flavor the job starts on: one of its flavors, which the caller books (the ledger's
    grant, the simulator's run)."""


@dataclass(frozen=True, slots=True)
class VictimChoice:
    run_id: str
    job_id: str
    team: str
    tier: Tier
    gpus: int
    expected_lost_gpu_s: float
    borrowed: bool
    why: str
    """Which rule made it a candidate: lower_tier, reclaim, or last_resort."""
    shrink_to: int = 0
    """An elastic run shrunk instead of stopped (DECISIONS 73): the workers it keeps, its first
    ones, and restarts with on their GPUs; `gpus` are the dropped workers'. 0: it stops."""
    share: int = 0
    """A GPU share stopped (DECISIONS 84): the quarters of its one GPU that it frees, with
    `gpus` 0; 0: it holds `gpus` whole GPUs."""


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    preemptor_job_id: str
    preemptor_tier: Tier
    victims: tuple[VictimChoice, ...]
    target: tuple[Slot, ...]
    expected_lost_gpu_s: float
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Reason:
    code: WaitReasonCode
    message: str
    details: tuple[tuple[str, DetailValue], ...] = ()

    def detail(self, key: str) -> DetailValue | None:
        return next((v for k, v in self.details if k == key), None)


@dataclass(frozen=True, slots=True)
class ScoreBreakdown:
    queue: float = 0.0
    age: float = 0.0
    fairshare: float = 0.0
    quota_headroom: float = 0.0

    @property
    def total(self) -> float:
        return self.queue + self.age + self.fairshare + self.quota_headroom


@dataclass(frozen=True, slots=True)
class PendingExplanation:
    job_id: str
    reasons: tuple[Reason, ...]
    """Every reason that applies, the primary one first; never empty."""
    eta: float | None
    position: int
    """1-based place in the flavor's queue order across all tiers, unique within it: the job
    first in line is 1; jobs admitted this cycle take no place."""
    factors: ScoreBreakdown

    @property
    def primary(self) -> WaitReasonCode:
        return self.reasons[0].code


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """Why a queue's long waits are not simply "too few GPUs", with the numbers."""

    tier: Tier
    team: str
    flavor: str
    cause: str
    """quota_too_low, flavor_too_narrow, request_too_large, queue_weight, fragmentation,
    budget_exhausted, capacity."""
    long_waiters: int
    oldest_wait_s: float
    message: str


@dataclass(frozen=True, slots=True)
class Grow:
    """An elastic run that grows (DECISIONS 74): it saves a checkpoint, then restarts with
    `workers` workers, its own GPUs plus `added` (held for it until then)."""

    run_id: str
    job_id: str
    workers: int
    added: tuple[Slot, ...]


@dataclass(frozen=True, slots=True)
class Decisions:
    admissions: tuple[Admission, ...] = ()
    plans: tuple[PreemptionPlan, ...] = ()
    pending: tuple[PendingExplanation, ...] = ()
    diagnoses: tuple[Diagnosis, ...] = ()
    abandoned_plans: tuple[str, ...] = ()
    """Preemptor job ids whose in-flight plan can no longer complete; the caller drops them."""
    deferred: tuple[tuple[str, float], ...] = ()
    """Jobs that would have searched for victims but for their queue's preemption delay, each
    with when the delay ends: a caller that runs cycles only on events wakes up then."""
    grows: tuple[Grow, ...] = ()
    """Elastic runs that grow on idle GPUs (`grow`); empty for a policy without elasticity."""


EMPTY_DECISIONS: Final = Decisions()
