"""`PolicyConfig`: the numbers the pure policy needs, detached from YAML and pydantic.

`policy_config_from(RotaConfig)` is the live path; the simulator and the tests build a
`PolicyConfig` directly. Teams that are not configured get quota 0 and may only borrow.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from rota.budget import Exhaustion, Period
from rota.config.model import RotaConfig
from rota.contracts.common import TIER_ORDER, Tier

__all__ = [
    "NO_LIMITS",
    "BudgetLimit",
    "PolicyConfig",
    "ScoreWeights",
    "TeamLimits",
    "TeamPolicy",
    "TierPolicy",
    "policy_config_from",
]


@dataclass(frozen=True, slots=True)
class TeamLimits:
    """One team's limits on one flavor. None means unlimited."""

    quota: int = 0
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @property
    def unlendable(self) -> int:
        """The part of the quota others may never borrow, even when it is idle."""
        if self.lending_limit is None:
            return 0
        return max(0, self.quota - self.lending_limit)


NO_LIMITS = TeamLimits()


@dataclass(frozen=True, slots=True)
class BudgetLimit:
    """A team's GPU-hour budget on one flavor per UTC calendar period."""

    gpu_hours: float
    period: Period = Period.month
    idle_only: bool = False
    """At the budget, jobs start on idle GPUs and the team's runs may be preempted by anyone;
    False: they wait with BUDGET_EXHAUSTED until the period resets."""

    @property
    def gpu_s(self) -> float:
        return self.gpu_hours * 3600.0


@dataclass(frozen=True, slots=True)
class TeamPolicy:
    name: str
    weight: float = 1.0
    limits: dict[str, TeamLimits] = field(default_factory=dict)

    def on(self, flavor: str) -> TeamLimits:
        return self.limits.get(flavor, NO_LIMITS)

    @property
    def shares(self) -> float:
        """Fair-share shares: the weighted nominal quota; a team without quota counts as 1 GPU."""
        return self.weight * max(1, sum(lim.quota for lim in self.limits.values()))


@dataclass(frozen=True, slots=True)
class TierPolicy:
    weight: float = 1.0
    preemptible: bool = True
    grace_s: float = 300.0
    long_wait_s: float = 3600.0


@dataclass(frozen=True, slots=True)
class ScoreWeights:
    queue: float = 1000.0
    age: float = 1000.0
    fairshare: float = 10_000.0
    quota_headroom: float = 500.0


def _default_tiers() -> dict[Tier, TierPolicy]:
    return {t: TierPolicy() for t in TIER_ORDER}


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    teams: dict[str, TeamPolicy] = field(default_factory=dict)
    tiers: dict[Tier, TierPolicy] = field(default_factory=_default_tiers)
    weights: ScoreWeights = ScoreWeights()
    age_cap_s: float = 7 * 86_400.0
    half_life_s: float = 7 * 86_400.0
    backfill: bool = True
    backfill_reservations: int = 1
    """How many blocked jobs per flavor get a start-time reservation (1 is EASY backfill)."""
    default_runtime_s: float = 4 * 3600.0
    preemption: bool = True
    min_runtime_s: float = 300.0
    max_preemptions_per_job: int = 10
    checkpoint_save_s: float = 60.0
    """How long a resumable victim is expected to take to save on notice."""
    max_preemption_attempts: int = 8
    """Blocked jobs per cycle that may search for victims; bounds the cost of a cycle."""
    max_lost_gpu_s_per_plan: float | None = 0.0
    """Unsaved GPU-seconds a plan may destroy, whatever the preemptor's tier (None: no cap).
    With save-on-notice a resumable victim loses nothing, so by default no plan stops a job
    that cannot checkpoint: it runs to its end."""
    budgets: dict[tuple[str, str], BudgetLimit] = field(default_factory=dict)
    """Per (team, flavor), its GPU-hour budget; a pair without one is never limited by use."""

    _shares: dict[str, float] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Every cycle weighs usage against shares: add up each configured team's quotas once.
        object.__setattr__(self, "_shares", {name: team.shares for name, team in self.teams.items()})

    def shares(self, teams: Iterable[str]) -> dict[str, float]:
        """Fair-share shares of every configured team and of `teams` (1 for a team without one)."""
        out = dict(self._shares)
        for team in teams:
            if team not in out:
                out[team] = TeamPolicy(team).shares
        return out

    def team(self, name: str) -> TeamPolicy:
        found = self.teams.get(name)
        return found if found is not None else TeamPolicy(name)

    def tier(self, tier: Tier) -> TierPolicy:
        found = self.tiers.get(tier)
        return found if found is not None else TierPolicy()

    def with_overrides(self, **changes: object) -> PolicyConfig:
        return replace(self, **changes)  # type: ignore[arg-type]


def policy_config_from(config: RotaConfig) -> PolicyConfig:
    teams = {
        name: TeamPolicy(
            name=name,
            weight=team.weight,
            limits={
                flavor: TeamLimits(
                    quota=team.quota.get(flavor, 0),
                    borrowing_limit=team.borrowing_limit.get(flavor),
                    lending_limit=team.lending_limit.get(flavor),
                )
                for flavor in sorted(set(team.quota) | set(team.borrowing_limit) | set(team.lending_limit))
            },
        )
        for name, team in config.teams.items()
    }
    tiers = {
        tier: TierPolicy(
            weight=queue.weight,
            preemptible=queue.preemptible,
            grace_s=queue.preemption_grace_s,
            long_wait_s=queue.long_wait_threshold_s,
        )
        for tier, queue in config.queues.items()
    }
    for tier in TIER_ORDER:
        tiers.setdefault(tier, TierPolicy())
    policy, preemption = config.policy, config.preemption
    weights = policy.weights
    return PolicyConfig(
        teams=teams,
        tiers=tiers,
        weights=ScoreWeights(
            queue=weights.queue,
            age=weights.age,
            fairshare=weights.fairshare,
            quota_headroom=weights.quota_headroom,
        ),
        age_cap_s=policy.age_cap_s,
        half_life_s=policy.fairshare_half_life_s,
        backfill=policy.backfill,
        backfill_reservations=policy.backfill_reservations,
        default_runtime_s=policy.default_runtime_estimate_s,
        preemption=preemption.enabled,
        min_runtime_s=preemption.min_runtime_s,
        max_preemptions_per_job=preemption.max_preemptions_per_job,
        checkpoint_save_s=preemption.checkpoint_save_s,
        max_preemption_attempts=preemption.max_attempts_per_cycle,
        max_lost_gpu_s_per_plan=preemption.max_lost_gpu_s_per_plan,
        budgets={
            (name, flavor): BudgetLimit(
                budget.gpu_hours, budget.period, budget.when_exhausted is Exhaustion.idle_only
            )
            for name, team in config.teams.items()
            for flavor, budget in team.budgets.items()
        },
    )
