"""The ledger's rules for one proposal, with no I/O: is the placement real, are its GPUs free
and not held for someone else, and do quota, borrowing and lending limits allow it?

`decide` sees a `Snapshot` of the ledger's own rows, taken inside the granting transaction, so
the answer is about the ledger's truth, never the scheduler's (possibly stale) view.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from rota.config import RotaConfig

QUARTERS = 4
"""A GPU share is quarters of one GPU (DECISIONS 66): the shares on one GPU sum to at most 4."""
HOLD_TTL_S = 3600.0
"""A plan's held GPUs go back to everyone after this long, should the preemptor never come."""

Gpu = tuple[str, int]
"""(node name, GPU index on that node)."""


class Code(StrEnum):
    """Why a proposal is rejected. Stable: the scheduler and humans key on them."""

    INVALID_PLACEMENT = "INVALID_PLACEMENT"
    UNKNOWN_FLAVOR = "UNKNOWN_FLAVOR"
    UNKNOWN_NODE = "UNKNOWN_NODE"
    WRONG_FLAVOR = "WRONG_FLAVOR"
    GPU_OUT_OF_RANGE = "GPU_OUT_OF_RANGE"
    RUN_ALREADY_ALLOCATED = "RUN_ALREADY_ALLOCATED"
    GPU_TAKEN = "GPU_TAKEN"
    HELD_FOR_PREEMPTOR = "HELD_FOR_PREEMPTOR"
    OVER_BORROWING_LIMIT = "OVER_BORROWING_LIMIT"
    OVER_LENDING_LIMIT = "OVER_LENDING_LIMIT"
    FLAVOR_NOT_SHAREABLE = "FLAVOR_NOT_SHAREABLE"
    GPU_SHARES_FULL = "GPU_SHARES_FULL"


@dataclass(frozen=True, slots=True)
class Rejection:
    code: Code
    message: str


@dataclass(frozen=True, slots=True)
class Seat:
    """One GPU of a grant, in placement order."""

    worker: int
    node: str
    gpu: int
    borrowed: bool
    share: int = 0
    """Quarters of the GPU the seat holds (a GPU share); 0: the GPU whole."""


@dataclass(frozen=True, slots=True)
class Grant:
    seats: tuple[Seat, ...]
    borrowed_gpus: int


Decision = Grant | Rejection


@dataclass(frozen=True, slots=True)
class Request:
    """What the ledger needs of an `AllocationProposed`."""

    team: str
    flavor: str
    gpus: int
    workers: Sequence[tuple[int, str, Sequence[int]]]
    """(worker index, node, GPU indices) per gang member."""
    plan_id: str | None = None
    share: int = 0
    """Quarters (1-3) of its one GPU, for a GPU share; 0: whole GPUs."""

    @property
    def demand(self) -> float:
        """What quota counts: its GPUs, or its share as a fraction of one."""
        return self.share / QUARTERS if self.share else self.gpus

    @property
    def wanted(self) -> list[Gpu]:
        return [(node, gpu) for _, node, gpus in self.workers for gpu in gpus]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The ledger's rows that bear on one request, read under the flavor's lock."""

    taken: Mapping[Gpu, str] = field(default_factory=dict)
    """Requested GPUs already allocated → the run holding each."""
    held: Mapping[Gpu, str] = field(default_factory=dict)
    """Requested GPUs held by an unexpired plan for another job → that plan."""
    in_use: Mapping[str, float] = field(default_factory=dict)
    """Active GPUs of the request's flavor, per team (a share counts its fraction)."""
    shared: Mapping[Gpu, int] = field(default_factory=dict)
    """Requested GPUs that GPU shares hold in part → the quarters they hold (`taken` holds
    the GPUs allocated whole)."""
    run_seen: bool = False
    """The proposal's run holds, or once held, GPUs: a run is allocated once, ever."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    flavor: str
    gpus: int


@dataclass(frozen=True, slots=True)
class Limits:
    """One team's limits on one flavor; None means unlimited."""

    quota: int = 0
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @property
    def unlendable(self) -> int:
        """The part of the quota no other team may borrow, even while it is idle."""
        return 0 if self.lending_limit is None else max(0, self.quota - self.lending_limit)


@dataclass(frozen=True, slots=True)
class Cluster:
    """The configuration, indexed for `decide`. Built once per process from `rota.yaml`."""

    nodes: Mapping[str, NodeInfo]
    capacity: Mapping[str, int]
    limits: Mapping[tuple[str, str], Limits]
    """(team, flavor) → limits. A team or flavor not configured: quota 0, borrowing unlimited,
    as in the scheduler's policy, so the two never disagree on what is allowed."""
    shareable: frozenset[str] = frozenset()
    """Flavors whose GPUs GPU shares may split (`shareable: true`)."""

    @classmethod
    def from_config(cls, config: RotaConfig) -> Cluster:
        limits = {
            (name, flavor): Limits(
                quota=team.quota.get(flavor, 0),
                borrowing_limit=team.borrowing_limit.get(flavor),
                lending_limit=team.lending_limit.get(flavor),
            )
            for name, team in config.teams.items()
            for flavor in {*team.quota, *team.borrowing_limit, *team.lending_limit}
        }
        return cls(
            nodes={n.name: NodeInfo(n.flavor, n.gpus) for n in config.expanded_nodes()},
            capacity=config.capacity(),
            limits=limits,
            shareable=frozenset(f.name for f in config.cluster.flavors if f.shareable),
        )

    def limits_of(self, team: str, flavor: str) -> Limits:
        return self.limits.get((team, flavor), Limits())


def _first(items: Sequence[str], more: int) -> str:
    shown = ", ".join(items[:more])
    return shown + (f" and {len(items) - more} more" if len(items) > more else "")


def check_placement(request: Request, cluster: Cluster) -> Rejection | None:
    """The placement names real GPUs of the right flavor, each once, as many as asked."""
    if request.flavor not in cluster.capacity:
        return Rejection(Code.UNKNOWN_FLAVOR, f"no flavor {request.flavor!r} is configured")
    wanted = request.wanted
    if len(wanted) != request.gpus:
        return Rejection(Code.INVALID_PLACEMENT,
                         f"the placement names {len(wanted)} GPUs but the proposal asks for"
                         f" {request.gpus}")
    if request.share:
        if request.flavor not in cluster.shareable:
            return Rejection(Code.FLAVOR_NOT_SHAREABLE,
                             f"flavor {request.flavor} does not allow GPU shares (set shareable:"
                             f" true on {request.flavor} in cluster.flavors)")
        if len(wanted) != 1 or not 0 < request.share < QUARTERS:
            return Rejection(Code.INVALID_PLACEMENT, "a GPU share holds part of one GPU of one"
                                                     f" worker; the placement names {len(wanted)}")
    if len(set(wanted)) != len(wanted):
        twice = sorted({f"{n}/{g}" for n, g in wanted if wanted.count((n, g)) > 1})
        return Rejection(Code.INVALID_PLACEMENT, f"the placement names GPU {_first(twice, 3)}"
                                                 " more than once")
    for node, gpu in wanted:
        info = cluster.nodes.get(node)
        if info is None:
            return Rejection(Code.UNKNOWN_NODE, f"no node {node!r} is configured")
        if info.flavor != request.flavor:
            return Rejection(Code.WRONG_FLAVOR,
                             f"node {node} is {info.flavor}, but the proposal is for {request.flavor}")
        if not 0 <= gpu < info.gpus:
            return Rejection(Code.GPU_OUT_OF_RANGE,
                             f"node {node} has GPUs 0..{info.gpus - 1}; the placement names {gpu}")
    return None


def check_quota(request: Request, in_use: Mapping[str, float], cluster: Cluster) -> Rejection | int:
    """The team's borrowing limit, then the other teams' lending limits. Returns the GPUs of
    the request above the team's quota (borrowed), or why it may not have them. A GPU
    share counts its fraction; one that goes above the quota borrows its one GPU.

    The same arithmetic as the scheduler's `QuotaBook.check`: all teams form one cohort.
    """
    team, flavor, gpus = request.team, request.flavor, request.demand
    limits = cluster.limits_of(team, flavor)
    after = in_use.get(team, 0) + gpus
    if after <= limits.quota:
        return 0
    borrowed = 1 if request.share else int(min(gpus, after - limits.quota))
    if limits.borrowing_limit is not None and after > limits.quota + limits.borrowing_limit:
        return Rejection(
            Code.OVER_BORROWING_LIMIT,
            f"team {team} would hold {after:g} {flavor} GPUs ({in_use.get(team, 0):g} held +"
            f" {gpus:g} asked); its quota is {limits.quota} and it may borrow at most"
            f" {limits.borrowing_limit} more",
        )
    kept_back = sum(
        max(0, other.unlendable - in_use.get(name, 0))
        for (name, fl), other in cluster.limits.items()
        if fl == flavor and name != team
    )
    if kept_back:
        room = cluster.capacity.get(flavor, 0) - kept_back
        total_after = sum(in_use.values()) + gpus
        if total_after > room:
            return Rejection(
                Code.OVER_LENDING_LIMIT,
                f"team {team} would borrow {after - limits.quota:g} {flavor} GPUs, but other"
                f" teams' lending limits keep {kept_back:g} of {cluster.capacity.get(flavor, 0)}"
                f" back: {total_after:g} in use would exceed {room:g}",
            )
    return borrowed


def _share_full(request: Request, snapshot: Snapshot) -> Rejection | None:
    """A share fits on its GPU if the shares there leave room for it: never above one GPU."""
    (gpu,) = request.wanted
    used = snapshot.shared.get(gpu, 0)
    if used + request.share <= QUARTERS:
        return None
    return Rejection(Code.GPU_SHARES_FULL,
                     f"GPU {gpu[0]}/{gpu[1]} has {used / QUARTERS:g} of 1 held by GPU shares;"
                     f" {request.share / QUARTERS:g} more would exceed one GPU")


def decide(request: Request, snapshot: Snapshot, cluster: Cluster) -> Decision:
    """Grant or reject one proposal. Placement first (a bad one can never succeed), then the
    state of the GPUs, then the limits."""
    if (bad := check_placement(request, cluster)) is not None:
        return bad
    if snapshot.run_seen:
        return Rejection(Code.RUN_ALREADY_ALLOCATED,
                         "this run was granted GPUs before; a new attempt needs a new run_id")
    wanted = request.wanted
    taken = [f"{n}/{g} (run {snapshot.taken[(n, g)]})" for n, g in wanted if (n, g) in snapshot.taken]
    if taken:
        return Rejection(Code.GPU_TAKEN, f"{len(taken)} of {len(wanted)} GPUs are allocated:"
                                         f" {_first(taken, 4)}")
    if request.share:
        full = _share_full(request, snapshot)
        if full is not None:
            return full
    else:
        shared = [f"{n}/{g}" for n, g in wanted if (n, g) in snapshot.shared]
        if shared:
            return Rejection(Code.GPU_TAKEN,
                             f"{len(shared)} of {len(wanted)} GPUs are held in part by GPU shares:"
                             f" {_first(shared, 4)} (a whole-GPU grant never meets a share)")
    held = [f"{n}/{g} (plan {snapshot.held[(n, g)]})" for n, g in wanted if (n, g) in snapshot.held]
    if held:
        return Rejection(Code.HELD_FOR_PREEMPTOR,
                         f"{len(held)} of {len(wanted)} GPUs are held for a preemptor:"
                         f" {_first(held, 4)}")
    quota = check_quota(request, snapshot.in_use, cluster)
    if isinstance(quota, Rejection):
        return quota
    # The last GPUs of the gang are the borrowed ones: which exact GPU is "borrowed" matters
    # only for counting, and the tail is what a reclaim would like to free first.
    first_borrowed = len(wanted) - quota
    seats = tuple(
        Seat(worker, node, gpu, borrowed=i >= first_borrowed, share=request.share)
        for i, (worker, node, gpu) in enumerate(
            (w, node, g) for w, node, gpus in request.workers for g in gpus
        )
    )
    return Grant(seats, quota)
