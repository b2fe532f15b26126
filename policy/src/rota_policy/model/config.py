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

from rota_policy.model.topology import TopologyNeed

__all__ = [
    "NO_LIMITS",
    "BudgetLimit",
    "PolicyConfig",
    "Protection",
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
    preemptible_by: frozenset[Tier] | None = None
    """The tiers whose jobs may stop this tier's runs, by any rule; None: every tier a rule
    allows (`preemption.victimrules.victim_category`)."""
    min_runtime_s: float | None = None
    """None: `PolicyConfig.min_runtime_s`."""
    max_preemptions_per_job: int | None = None
    """None: `PolicyConfig.max_preemptions_per_job`."""
    preemption_delay_s: float | None = None
    """None: `PolicyConfig.preemption_delay_s`."""


@dataclass(frozen=True, slots=True)
class Protection:
    """One tier's protection with the global defaults filled in: what every cycle asks."""

    min_runtime_s: float
    max_preemptions: int
    delay_s: float
    shielded_from: frozenset[Tier]
    """As a preemptor: the tiers whose runs it may never stop (`TierPolicy.preemptible_by`)."""


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
    that cannot checkpoint: it runs to its end, unless it runs on borrowed GPUs whose owner
    has waited its wait target for them (`victimrules.reclaims_at_any_loss`)."""
    preemption_delay_s: float = 0.0
    """How long after submission a job waits for GPUs to free themselves before it may stop
    anyone; a tier's `preemption_delay_s` overrides it."""
    grow_after_s: float = 1800.0
    """How long an elastic run must have run since it last started before it may grow on idle
    GPUs (`grow`), so that a cluster that empties and fills does not restart it every cycle."""
    budgets: dict[tuple[str, str], BudgetLimit] = field(default_factory=dict)
    """Per (team, flavor), its GPU-hour budget; a pair without one is never limited by use."""
    shareable: frozenset[str] = frozenset()
    """The flavors whose GPUs GPU shares may split (`shareable: true` on the flavor in
    `cluster.flavors`, DECISIONS 66); a share asking for another waits with NO_MATCHING_FLAVOR."""
    gang_topology: TopologyNeed | None = None
    """What a gang that asks for no topology gets (`cluster.topology.gangs`); read where jobs
    are made (`job_topology`: the scheduler's view, the simulator), not by `schedule`."""

    _shares: dict[str, float] = field(init=False, repr=False, compare=False)
    _protection: dict[Tier, Protection] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Every cycle weighs usage against shares: add up each configured team's quotas once.
        object.__setattr__(self, "_shares", {name: team.shares for name, team in self.teams.items()})
        # Every cycle filters every running run by its tier's protection: resolve it once.
        object.__setattr__(self, "_protection", {t: self._resolve(t) for t in TIER_ORDER})

    def _resolve(self, tier: Tier) -> Protection:
        own = self.tier(tier)
        shielded = frozenset(
            victim
            for victim in TIER_ORDER
            if (by := self.tier(victim).preemptible_by) is not None and tier not in by
        )
        return Protection(
            min_runtime_s=self.min_runtime_s if own.min_runtime_s is None else own.min_runtime_s,
            max_preemptions=(
                self.max_preemptions_per_job if own.max_preemptions_per_job is None
                else own.max_preemptions_per_job
            ),
            delay_s=self.preemption_delay_s if own.preemption_delay_s is None else own.preemption_delay_s,
            shielded_from=shielded,
        )

    def protection(self, tier: Tier) -> Protection:
        """`tier`'s minimum runtime, preemption budget and delay, and which tiers it may not stop."""
        return self._protection[tier]

    def may_preempt(self, preemptor: Tier, victim: Tier) -> bool:
        """Whether the victim's queue lets a job of the preemptor's tier stop it at all (the other
        rules, `preemption.victimrules.victim_category`, still apply)."""
        return victim not in self._protection[preemptor].shielded_from

    def preemption_allowed_at(self, tier: Tier, submitted_at: float) -> float:
        """When a job of `tier` submitted at `submitted_at` may first stop anyone."""
        return submitted_at + self._protection[tier].delay_s

    def without_protection(self) -> PolicyConfig:
        """No minimum runtime, budget, delay or per-queue rule: the baselines model systems that
        have none of Rota's protections."""
        tiers = {
            t: replace(p, preemptible_by=None, min_runtime_s=None, max_preemptions_per_job=None,
                       preemption_delay_s=None)
            for t, p in self.tiers.items()
        }
        return replace(self, tiers=tiers, min_runtime_s=0.0, max_preemptions_per_job=1_000_000,
                       preemption_delay_s=0.0)

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
    policy, preemption = config.policy, config.preemption
    weights = policy.weights
    return PolicyConfig(
        teams=_teams_from(config),
        tiers=_tiers_from(config),
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
        preemption_delay_s=preemption.delay_s,
        grow_after_s=policy.grow_after_s,
        budgets=_budgets_from(config),
        shareable=frozenset(f.name for f in config.cluster.flavors if f.shareable),
        gang_topology=gangs_of(config),
    )


def _teams_from(config: RotaConfig) -> dict[str, TeamPolicy]:
    return {
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


def _tiers_from(config: RotaConfig) -> dict[Tier, TierPolicy]:
    tiers = {
        tier: TierPolicy(
            weight=queue.weight,
            preemptible=queue.preemptible,
            grace_s=queue.preemption_grace_s,
            long_wait_s=queue.long_wait_threshold_s,
            preemptible_by=None if queue.preemptible_by is None else frozenset(queue.preemptible_by),
            min_runtime_s=queue.min_runtime_s,
            max_preemptions_per_job=queue.max_preemptions_per_job,
            preemption_delay_s=queue.preemption_delay_s,
        )
        for tier, queue in config.queues.items()
    }
    for tier in TIER_ORDER:
        tiers.setdefault(tier, TierPolicy())
    return tiers


def _budgets_from(config: RotaConfig) -> dict[tuple[str, str], BudgetLimit]:
    return {
        (name, flavor): BudgetLimit(
            budget.gpu_hours, budget.period, budget.when_exhausted is Exhaustion.idle_only
        )
        for name, team in config.teams.items()
        for flavor, budget in team.budgets.items()
    }


def gangs_of(config: RotaConfig) -> TopologyNeed | None:
    """The topology a gang that asks for none gets: `cluster.topology.gangs` of rota.yaml."""
    topology = config.cluster.topology
    gangs = None if topology is None else topology.gangs
    return None if gangs is None else TopologyNeed(gangs.required, gangs.preferred)
