"""The `rota.yaml` model: cluster, queues (tiers), teams, policy weights, preemption."""

from __future__ import annotations

from functools import cached_property
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from rota.budget import Exhaustion, Period
from rota.config.kubernetes import KubernetesPolicy
from rota.contracts.common import Name, TeamName, Tier

NonNegGpus = Annotated[int, Field(ge=0, le=1_000_000)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Flavor(_Strict):
    name: Name
    description: str = ""
    shareable: bool = Field(
        False,
        description="Whether single-worker jobs may ask for a share of one GPU of this flavor"
        " (0.25, 0.5 or 0.75); the shares on one GPU never exceed 1.",
    )


class NodePool(_Strict):
    """`count` identical nodes, named `<name>-<i>`, spread over `racks` racks in order."""

    name: Name
    flavor: Name
    count: int = Field(ge=1, le=100_000)
    gpus_per_node: int = Field(ge=1, le=64)
    racks: int = Field(1, ge=1, le=10_000)
    nodes_per_rack: int | None = Field(None, ge=1)
    racks_per: dict[Name, Annotated[int, Field(ge=1, le=10_000)]] = Field(
        default_factory=dict,
        description="Per topology level outside `rack`: how many consecutive racks share one"
        " domain, named `<pool>-<level>-<i>` (e.g. {block: 4}).",
    )


class Node(_Strict):
    name: Name
    flavor: Name
    gpus: int = Field(ge=1, le=64)
    rack: Name = "rack-0"
    topology: dict[Name, Name] = Field(
        default_factory=dict, description="The node's domain per topology level other than `rack`."
    )


class GangTopology(_Strict):
    """What a job of several workers that asks for no topology (and no rack affinity) gets."""

    required: Name | None = None
    preferred: Name | None = None


class Topology(_Strict):
    """The cluster's topology levels, outermost first; `rack` is one of them if listed, and the
    node is the implicit innermost level."""

    levels: Annotated[list[Name], Field(min_length=1, max_length=8)]
    gangs: GangTopology | None = None


class Cluster(_Strict):
    flavors: Annotated[list[Flavor], Field(min_length=1)]
    node_pools: list[NodePool] = Field(default_factory=list)
    nodes: list[Node] = Field(default_factory=list)
    topology: Topology | None = None


class Queue(_Strict):
    """A tier. Tiers are strict priority classes; `weight` orders jobs within scoring.

    The protection fields say how this queue's running jobs are shielded from preemption, and
    how long its pending jobs wait before they stop anyone; unset, the `preemption` section's
    value applies."""

    weight: float = Field(1.0, ge=0)
    preemptible: bool = True
    preemption_grace_s: float = Field(300.0, ge=0, le=86_400)
    long_wait_threshold_s: float = Field(3600.0, gt=0)
    preemptible_by: list[Tier] | None = Field(
        None,
        description="Tiers whose jobs may stop this queue's jobs, by any rule (lower tier or"
        " reclaim); absent = every tier a rule allows.",
    )
    min_runtime_s: float | None = Field(
        None, ge=0, description="A run of this queue younger than this is never a victim."
    )
    max_preemptions_per_job: int | None = Field(
        None, ge=0, description="A job of this queue preempted this often is never a victim again."
    )
    preemption_delay_s: float | None = Field(
        None,
        ge=0,
        le=7 * 86_400,
        description="How long after submission a job of this queue waits for GPUs to free"
        " themselves before it stops anyone.",
    )


class Contact(_Strict):
    email: str | None = Field(None, max_length=254, pattern=r"^[^@\s]+@[^@\s]+$")
    slack_id: str | None = Field(None, max_length=64)
    timezone: str = "UTC"
    opt_out: list[str] = Field(default_factory=list)
    preemption_channel: str | None = Field(None, pattern=r"^(slack|email)$")


class Budget(_Strict):
    """GPU-hours a team may use of one flavor per UTC calendar period (Slurm's GrpTRESMins)."""

    gpu_hours: float = Field(gt=0, le=1e9)
    period: Period = Period.month
    when_exhausted: Exhaustion = Field(
        Exhaustion.wait,
        description="wait: new jobs wait with BUDGET_EXHAUSTED until the period resets;"
        " idle_only: they start only on idle GPUs, and the team's runs may be preempted by anyone.",
    )


class Intake(_Strict):
    """How much one team may put in front of the scheduler: a bound on its waiting jobs and a
    token bucket on its submissions, so that one team's flood is refused at the door instead of
    filling the queue, the streams and the database for everyone."""

    max_pending: int = Field(
        10_000, ge=1, le=10_000_000,
        description="Jobs of the team that may wait (state pending) at once; a submission past"
        " it is refused with PENDING_LIMIT.")
    submit_rate_per_s: float = Field(
        100.0, gt=0, le=1_000_000,
        description="New jobs the team may submit per second, on average; past it (and the"
        " burst) a submission is refused with RATE_LIMITED.")
    submit_burst: int = Field(
        2_000, ge=1, le=10_000_000,
        description="New jobs the team may submit at once (the bucket's size): a sweep of this"
        " many is accepted whole.")


class TeamIntake(_Strict):
    """A team's own intake limits; a field left out takes the `intake:` section's."""

    max_pending: int | None = Field(None, ge=1, le=10_000_000)
    submit_rate_per_s: float | None = Field(None, gt=0, le=1_000_000)
    submit_burst: int | None = Field(None, ge=1, le=10_000_000)


class Team(_Strict):
    weight: float = Field(1.0, gt=0)
    quota: dict[Name, NonNegGpus] = Field(default_factory=dict)
    borrowing_limit: dict[Name, NonNegGpus | None] = Field(
        default_factory=dict, description="Extra GPUs per flavor beyond quota; absent = no limit."
    )
    lending_limit: dict[Name, NonNegGpus | None] = Field(
        default_factory=dict, description="Most of the quota others may borrow; absent = all."
    )
    budgets: dict[Name, Budget] = Field(
        default_factory=dict, description="GPU-hour budget per flavor; absent = no budget."
    )
    slack_channel: str | None = Field(None, max_length=80)
    email: str | None = Field(None, max_length=254)
    users: dict[Name, Contact] = Field(default_factory=dict)
    intake: TeamIntake | None = Field(
        None, description="This team's intake limits, over the `intake:` section's.")


class PolicyWeights(_Strict):
    queue: float = Field(1000.0, ge=0)
    age: float = Field(1000.0, ge=0)
    fairshare: float = Field(10_000.0, ge=0)
    quota_headroom: float = Field(500.0, ge=0)


class Policy(_Strict):
    weights: PolicyWeights = PolicyWeights()
    age_cap_s: float = Field(7 * 86_400.0, gt=0)
    fairshare_half_life_s: float = Field(7 * 86_400.0, gt=0)
    backfill: bool = True
    default_runtime_estimate_s: float = Field(4 * 3600.0, gt=0)
    backfill_reservations: int = Field(
        1, ge=1, le=10_000, description="Blocked jobs per flavor that get a reservation (1: EASY)."
    )
    grow_after_s: float = Field(
        1800.0, ge=0, le=7 * 86_400,
        description="An elastic run grows on idle GPUs only after it has run this long since it"
        " last started.",
    )


class Preemption(_Strict):
    enabled: bool = True
    min_runtime_s: float = Field(300.0, ge=0)
    max_preemptions_per_job: int = Field(10, ge=0)
    delay_s: float = Field(
        0.0,
        ge=0,
        le=7 * 86_400,
        description="How long after submission a job waits for GPUs to free themselves before"
        " it stops anyone (0: it may preempt at once); a queue's preemption_delay_s overrides it.",
    )
    default_grace_s: float = Field(300.0, ge=0, le=86_400)
    checkpoint_save_s: float = Field(
        60.0, ge=0, le=3600, description="Expected time for a resumable victim to save on notice."
    )
    max_attempts_per_cycle: int = Field(
        8, ge=0, le=10_000, description="Blocked jobs per cycle that may search for victims."
    )
    max_lost_gpu_s_per_plan: float | None = Field(
        0.0,
        ge=0,
        description="Unsaved GPU-seconds a plan may destroy, whatever the preemptor's tier"
        " (None: any); borrowed GPUs taken back by a team that waited its wait target are"
        " not counted.",
    )


class RotaConfig(_Strict):
    cluster: Cluster
    queues: dict[Tier, Queue] = Field(default_factory=lambda: {t: Queue() for t in Tier})
    teams: dict[TeamName, Team]
    policy: Policy = Policy()
    preemption: Preemption = Preemption()
    intake: Intake = Intake()
    kubernetes: KubernetesPolicy = KubernetesPolicy()

    def intake_for(self, team: str) -> Intake:
        """The intake limits of `team`: its own fields over the `intake:` section's."""
        own = self.teams[team].intake if team in self.teams else None
        if own is None:
            return self.intake
        return self.intake.model_copy(update=own.model_dump(exclude_none=True))

    def expanded_nodes(self) -> list[Node]:
        """Every node, pools expanded. Cached: services ask on every message and every cycle."""
        return list(self.all_nodes)

    @cached_property
    def all_nodes(self) -> tuple[Node, ...]:
        nodes = list(self.cluster.nodes)
        for pool in self.cluster.node_pools:
            per_rack = pool.nodes_per_rack or -(-pool.count // pool.racks)
            nodes.extend(
                Node(
                    name=f"{pool.name}-{i}",
                    flavor=pool.flavor,
                    gpus=pool.gpus_per_node,
                    rack=f"{pool.name}-rack-{i // per_rack}",
                    topology={
                        level: f"{pool.name}-{level}-{i // per_rack // racks}"
                        for level, racks in pool.racks_per.items()
                    },
                )
                for i in range(pool.count)
            )
        return tuple(nodes)

    def node_levels(self, node: Node) -> tuple[tuple[str, str], ...]:
        """(level, domain) per declared topology level, outermost first, for the policy's
        `NodeState.levels`; empty when the cluster declares none (`rack` is then the one level)."""
        topology = self.cluster.topology
        if topology is None:
            return ()
        return tuple((level, node.rack if level == "rack" else node.topology.get(level, ""))
                     for level in topology.levels)

    def capacity(self) -> dict[str, int]:
        total: dict[str, int] = {f.name: 0 for f in self.cluster.flavors}
        for node in self.expanded_nodes():
            total[node.flavor] = total.get(node.flavor, 0) + node.gpus
        return total

    def largest_gang(self, flavor: str) -> int:
        """The most GPUs one job of `flavor` can ever get: every node of that flavor."""
        return self.capacity().get(flavor, 0)

    def max_node_gpus(self, flavor: str) -> int:
        return max((n.gpus for n in self.expanded_nodes() if n.flavor == flavor), default=0)
