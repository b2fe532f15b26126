"""Small fixture builders for policy scenarios: a cluster, running work, pending jobs, config."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from rota.contracts.common import Tier
from rota.contracts.job import RackAffinity
from rota_policy import (
    BudgetLimit,
    NodeState,
    NoExecutor,
    PendingJob,
    PlanInFlight,
    PolicyConfig,
    RunningRun,
    Slot,
    Snapshot,
    TeamLimits,
    TeamPolicy,
    TierPolicy,
    TopologyNeed,
    group_pending,
)

FLAVOR = "gpu"


def gpu_jobs(
    team: str,
    tier: str = "training",
    n: int = 1,
    gpus: int = 8,
    *,
    workers: int = 1,
    submitted: float = 0.0,
    runtime: float | None = None,
    rack: str = "none",
    flavor: str = FLAVOR,
    resumable: bool = True,
    name: str | None = None,
    fallback: tuple[str, ...] = (),
    topology: tuple[str | None, str | None] | None = None,
    share: int = 0,
    workers_max: int = 0,
) -> list[PendingJob]:
    """`n` pending jobs of `workers x gpus` each (gpus is per worker), one second apart;
    `topology` is (required, preferred) level; `share` quarters of one GPU make each a GPU
    share (one worker of one GPU); `workers_max` above `workers` makes each an elastic gang of
    `workers` to `workers_max`."""
    base = name or f"{team}-{tier[:4]}-{workers}x{gpus}"
    return [
        PendingJob(
            job_id=f"{base}-{i}" if n > 1 else base,
            team=team,
            tier=Tier(tier),
            flavor=flavor,
            workers=1 if share else workers,
            gpus_per_worker=1 if share else gpus,
            submitted_at=submitted + i,
            runtime_estimate_s=runtime,
            rack=RackAffinity(rack),
            resumable=resumable,
            fallback=fallback,
            topology=None if topology is None else TopologyNeed(*topology),
            share=share,
            workers_max=workers_max,
        )
        for i in range(n)
    ]


def team_config(
    quotas: dict[str, int] | None = None,
    *,
    borrowing: dict[str, int] | None = None,
    lending: dict[str, int] | None = None,
    budgets: dict[str, BudgetLimit] | None = None,
    flavors: dict[str, dict[str, int]] | None = None,
    **overrides: object,
) -> PolicyConfig:
    """`quotas` on the `gpu` flavor; `flavors` gives each team's quota per other flavor (its
    borrowing and lending limits apply to every flavor)."""
    def limits(name: str, quota: int) -> TeamLimits:
        return TeamLimits(quota, (borrowing or {}).get(name), (lending or {}).get(name))

    names = sorted(set(quotas or {}) | set(flavors or {}))
    teams = {
        name: TeamPolicy(
            name,
            1.0,
            {
                **({FLAVOR: limits(name, (quotas or {})[name])} if name in (quotas or {}) else {}),
                **{f: limits(name, q) for f, q in (flavors or {}).get(name, {}).items()},
            },
        )
        for name in names
    }
    # Tier weights as in the example rota.yaml: production 3, training 2, experiment 1.
    tiers = {
        Tier.production: TierPolicy(3.0),
        Tier.training: TierPolicy(2.0),
        Tier.experiment: TierPolicy(1.0),
    }
    budget_map = {(team, FLAVOR): limit for team, limit in (budgets or {}).items()}
    return PolicyConfig(teams=teams, tiers=tiers, budgets=budget_map).with_overrides(**overrides)


@dataclass
class World:
    """Nodes of 8 GPUs (`racks` racks, filled in order) with runs placed where you say."""

    nodes: int = 2
    racks: int = 1
    gpus: int = 8
    flavor: str = FLAVOR
    free: list[list[int]] = field(default_factory=list)
    runs: list[RunningRun] = field(default_factory=list)
    plans: list[PlanInFlight] = field(default_factory=list)
    usage: dict[str, float] = field(default_factory=dict)
    budget_used: dict[tuple[str, str], float] | None = None
    """GPU-seconds used this period per (team, flavor) with a budget; None: none passed."""
    flavors: dict[int, str] = field(default_factory=dict)
    """Nodes of another flavor than `flavor`, by index."""
    blocks: int = 0
    """Blocks the racks are grouped into, in order: the cluster declares levels block > rack;
    0: it declares none (`rack` is the one level)."""
    parts: dict[int, dict[int, int]] = field(default_factory=dict)
    """Per node, the GPUs that shares hold in part: GPU index -> quarters held."""
    unrunnable: dict[str, NoExecutor] = field(default_factory=dict)
    """Pending jobs no running executor can run, by id (`Snapshot.unrunnable`)."""

    def __post_init__(self) -> None:
        self.free = [list(range(self.gpus)) for _ in range(self.nodes)]

    def _take_share(self, node: int, share: int, gpu: int | None) -> int:
        held = self.parts.setdefault(node, {})
        if gpu is None:
            gpu = next((g for g, used in sorted(held.items()) if used + share <= 4), None)
        if gpu is None or gpu not in held:
            gpu = self.free[node][0] if gpu is None else gpu
            self.free[node].remove(gpu)
            held[gpu] = 0
        assert held[gpu] + share <= 4, f"GPU {gpu} of node {node} has no room for {share} quarters"
        held[gpu] += share
        return gpu

    def name(self, node: int) -> str:
        return f"n{node}"

    def flavor_of(self, node: int) -> str:
        return self.flavors.get(node, self.flavor)

    def rack_of(self, node: int) -> str:
        per = -(-self.nodes // self.racks)
        return f"r{node // per}"

    def levels_of(self, node: int) -> tuple[tuple[str, str], ...]:
        if not self.blocks:
            return ()
        rack = node // -(-self.nodes // self.racks)
        return (("block", f"b{rack // -(-self.racks // self.blocks)}"), ("rack", self.rack_of(node)))

    def run(
        self,
        team: str,
        tier: str = "experiment",
        *,
        node: int | list[int] = 0,
        gpus: int = 8,
        started: float = -3600.0,
        resumable: bool = True,
        preemptions: int = 0,
        end: float | None = None,
        run_id: str | None = None,
        checkpoint: float | None = None,
        share: int = 0,
        gpu: int | None = None,
        elastic_min: int = 0,
    ) -> RunningRun:
        """A run holding `gpus` GPUs on each of `node` (one node or several); with `share`, a
        GPU share of that many quarters on `node` (on GPU `gpu`, else the first with room); with
        `elastic_min`, an elastic gang of that min to 8 workers."""
        nodes = [node] if isinstance(node, int) else node
        placement = []
        if share:
            placement.append(Slot(0, self.name(nodes[0]), (self._take_share(nodes[0], share, gpu),), share))
            gpus, nodes = 0, nodes[:1]
        for w, n in enumerate(nodes if not share else ()):
            taken = tuple(self.free[n][:gpus])
            assert len(taken) == gpus, f"node {n} has only {len(self.free[n])} free"
            del self.free[n][:gpus]
            placement.append(Slot(w, self.name(n), taken))
        rid = run_id or f"run-{team}-{tier[:4]}-{len(self.runs)}"
        run = RunningRun(
            run_id=rid,
            job_id=f"job-{rid}",
            team=team,
            tier=Tier(tier),
            flavor=self.flavor_of(nodes[0]),
            placement=tuple(placement),
            gpus=gpus * len(nodes),
            started_at=started,
            last_checkpoint_at=checkpoint if checkpoint is not None else (started if resumable else None),
            resumable=resumable,
            preemptions=preemptions,
            expected_end=end,
            share=share,
            workers_range=(elastic_min, 8) if elastic_min else None,
        )
        self.runs.append(run)
        return run

    def snapshot(self, pending: list[PendingJob], *, explain: frozenset[str] | None = None) -> Snapshot:
        nodes = tuple(
            NodeState(self.name(i), self.flavor_of(i), self.rack_of(i), self.gpus, tuple(sorted(f)),
                      self.levels_of(i), tuple(sorted((g, u) for g, u in self.parts.get(i, {}).items() if u)))
            for i, f in enumerate(self.free)
        )
        return Snapshot(
            nodes, tuple(self.runs), group_pending(pending), dict(self.usage), tuple(self.plans), explain,
            budget_used=self.budget_used, unrunnable=self.unrunnable or None,
        )

    def finish(self, run: RunningRun) -> None:
        """The run stops: its GPUs come back."""
        self.runs = [r for r in self.runs if r.run_id != run.run_id]
        for slot in run.placement:
            node = int(slot.node[1:])
            if slot.share:
                held = self.parts[node]
                held[slot.gpus[0]] -= slot.share
                if held[slot.gpus[0]]:
                    continue
                del held[slot.gpus[0]]
            self.free[node].extend(slot.gpus)

    def with_run(self, run: RunningRun) -> RunningRun:
        return replace(run)


@dataclass(frozen=True)
class Run:
    """A running run to place in a `cluster` (see `World.run` for the fields)."""

    team: str
    tier: str = "experiment"
    node: int | list[int] = 0
    gpus: int = 8
    started: float = -3600.0
    resumable: bool = True
    preemptions: int = 0
    end: float | None = None
    run_id: str | None = None
    checkpoint: float | None = None
    share: int = 0
    gpu: int | None = None
    elastic_min: int = 0


def cluster(
    nodes: int = 2,
    *runs: Run,
    racks: int = 1,
    usage: dict[str, float] | None = None,
    drained: tuple[int, ...] = (),
    plans: tuple[PlanInFlight, ...] = (),
    budget_used: dict[str, float] | None = None,
    flavors: dict[int, str] | None = None,
    blocks: int = 0,
    unrunnable: dict[str, NoExecutor] | None = None,
) -> World:
    """A world of `nodes` nodes with `runs` placed in order; `drained` nodes have nothing free;
    `budget_used` is GPU-hours per team used this period of the budgeted flavor; `flavors`
    names the nodes of another flavor than `gpu`; `blocks` groups the racks into that many
    blocks, declaring the levels block > rack."""
    used = None if budget_used is None else {(team, FLAVOR): h * 3600.0 for team, h in budget_used.items()}
    world = World(nodes=nodes, racks=racks, usage=dict(usage or {}), plans=list(plans), budget_used=used,
                  flavors=dict(flavors or {}), blocks=blocks, unrunnable=dict(unrunnable or {}))
    for r in runs:
        world.run(
            r.team, r.tier, node=r.node, gpus=r.gpus, started=r.started, resumable=r.resumable,
            preemptions=r.preemptions, end=r.end, run_id=r.run_id, checkpoint=r.checkpoint,
            share=r.share, gpu=r.gpu,
            elastic_min=r.elastic_min,
        )  # fmt: skip
    for node in drained:
        world.free[node] = []
    return world
