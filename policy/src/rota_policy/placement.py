"""Gang placement: all workers or none, best-fit, with rack affinity.

Best-fit puts each worker on the node with the fewest free GPUs that still fits it, so whole
nodes stay free for the large gangs that need them. Nodes are kept in buckets by free count,
which makes the common case (no rack constraint) cost O(workers x GPUs per node).
"""

from __future__ import annotations

from collections.abc import Sequence

from rota.contracts.job import RackAffinity

from rota_policy.model import NodeState, PendingJob, Slot

__all__ = ["ClusterState", "Fit", "fit_on_counts"]

Fit = list[tuple[int, int]]
"""(node index, GPUs) per worker, in worker order."""


def _fit_nodes(order: Sequence[int], counts: Sequence[int], workers: int, per_worker: int) -> Fit | None:
    """Fill `workers` slots from nodes taken in `order` (tightest first); None if short."""
    fit: Fit = []
    for node in order:
        slots = counts[node] // per_worker
        while slots > 0 and len(fit) < workers:
            fit.append((node, per_worker))
            slots -= 1
        if len(fit) == workers:
            return fit
    return None


def fit_on_counts(
    counts: Sequence[int],
    nodes: Sequence[int],
    racks: Sequence[str],
    workers: int,
    per_worker: int,
    rack: RackAffinity,
) -> Fit | None:
    """Best-fit over arbitrary free counts (the slow path: preemption trials, rack affinity)."""
    usable = sorted((counts[n], n) for n in nodes if counts[n] >= per_worker)
    if sum(c // per_worker for c, _ in usable) < workers:
        return None
    if rack is not RackAffinity.none:
        by_rack: dict[str, list[int]] = {}
        for _, n in usable:
            by_rack.setdefault(racks[n], []).append(n)
        best: tuple[int, str] | None = None
        for name, members in by_rack.items():
            slots = sum(counts[n] // per_worker for n in members)
            if slots >= workers and (best is None or (slots, name) < best):
                best = (slots, name)
        if best is not None:
            return _fit_nodes(by_rack[best[1]], counts, workers, per_worker)
        if rack is RackAffinity.required:
            return None
    return _fit_nodes([n for _, n in usable], counts, workers, per_worker)


LayoutKey = tuple[tuple[str, str, str, int], ...]
"""Each node's name, flavor, rack and GPUs, in node order."""


class _Layout:
    """What depends only on the cluster's layout, never on what is free: the nodes' names,
    flavors, racks and sizes, and the answers derived from them. Kept from one cycle to the
    next while the layout stays the same; read-only once built, but for the memos."""

    __slots__ = (
        "capacity",
        "empty_slots",
        "fit_ever",
        "flavor_nodes",
        "flavors",
        "index",
        "key",
        "max_node",
        "names",
        "node_flavor",
        "rack_slots",
        "racks",
        "size",
    )

    def __init__(self, key: LayoutKey) -> None:
        self.key = key
        self.names = [name for name, _, _, _ in key]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.node_flavor = [flavor for _, flavor, _, _ in key]
        self.racks = [rack for _, _, rack, _ in key]
        self.size = [gpus for _, _, _, gpus in key]
        self.capacity: dict[str, int] = {}
        self.max_node: dict[str, int] = {}
        self.flavor_nodes: dict[str, list[int]] = {}
        for i, (_, f, _, gpus) in enumerate(key):
            self.capacity[f] = self.capacity.get(f, 0) + gpus
            self.max_node[f] = max(self.max_node.get(f, 0), gpus)
            self.flavor_nodes.setdefault(f, []).append(i)
        self.flavors = frozenset(self.capacity)
        self.rack_slots: dict[tuple[str, int], int] = {}
        """The most workers of a given size one rack can ever host, for EXCEEDS_CLUSTER."""
        self.empty_slots: dict[tuple[str, int], int] = {}
        self.fit_ever: dict[tuple[str, int, int, RackAffinity], bool] = {}


_last_layout: list[_Layout] = []
"""The layout of the last ClusterState built. What it holds is a pure function of the layout,
so no cycle's result depends on it; it spares each cycle of a replay building it again, and
asking again, per shape, whether a job could ever fit."""


def _layout(nodes: tuple[NodeState, ...]) -> _Layout:
    key = tuple([(n.name, n.flavor, n.rack, n.gpus) for n in nodes])
    if _last_layout and _last_layout[0].key == key:
        return _last_layout[0]
    layout = _Layout(key)
    _last_layout[:] = [layout]
    return layout


class ClusterState:
    """A mutable working copy of the nodes for one cycle."""

    __slots__ = (
        "buckets",
        "capacity",
        "empty_slots",
        "fit_ever",
        "flavor_nodes",
        "flavors",
        "free",
        "free_total",
        "index",
        "max_node",
        "names",
        "node_flavor",
        "rack_slots",
        "racks",
        "size",
    )

    def __init__(self, nodes: tuple[NodeState, ...]) -> None:
        layout = _layout(nodes)
        self.names, self.index, self.node_flavor = layout.names, layout.index, layout.node_flavor
        self.racks, self.size, self.flavors = layout.racks, layout.size, layout.flavors
        self.capacity, self.max_node = layout.capacity, layout.max_node
        self.flavor_nodes = layout.flavor_nodes
        self.rack_slots, self.empty_slots = layout.rack_slots, layout.empty_slots
        self.fit_ever = layout.fit_ever
        free = self.free = [list(n.free) for n in nodes]
        self.free_total: dict[str, int] = {}
        self.buckets: dict[str, list[dict[int, None]]] = {}
        for f, members in self.flavor_nodes.items():
            buckets: list[dict[int, None]] = [{} for _ in range(self.max_node[f] + 1)]
            total = 0
            for i in members:
                count = len(free[i])
                buckets[count][i] = None
                total += count
            self.buckets[f] = buckets
            self.free_total[f] = total

    # ------------------------------------------------------------ queries

    def counts(self) -> list[int]:
        return [len(f) for f in self.free]

    def free_on(self, flavor: str) -> int:
        return self.free_total.get(flavor, 0)

    def worker_slots(self, flavor: str, gpus_per_worker: int) -> int:
        """How many workers of this size the flavor's nodes hold when empty (memoized: a walk
        asks this for every pending job, and the answer depends only on the cluster's shape)."""
        key = (flavor, gpus_per_worker)
        slots = self.empty_slots.get(key)
        if slots is None:
            slots = sum(self.size[n] // gpus_per_worker for n in self.flavor_nodes.get(flavor, []))
            self.empty_slots[key] = slots
        return slots

    def can_ever_fit(self, job: PendingJob) -> bool:
        """Would the job fit on an empty cluster? False means EXCEEDS_CLUSTER (memoized per
        shape: the walk asks for every job it looks at)."""
        return self.shape_fits(job.flavor, job.workers, job.gpus_per_worker, job.rack)

    def shape_fits(self, flavor: str, workers: int, per_worker: int, rack: RackAffinity) -> bool:
        """`can_ever_fit` for a job of this shape."""
        shape = (flavor, workers, per_worker, rack)
        fits = self.fit_ever.get(shape)
        if fits is None:
            fits = self.fit_ever[shape] = self._can_ever_fit(*shape)
        return fits

    def _can_ever_fit(self, f: str, workers: int, per_worker: int, rack: RackAffinity) -> bool:
        if per_worker > self.max_node.get(f, 0) or workers * per_worker > self.capacity.get(f, 0):
            return False
        members = self.flavor_nodes.get(f, [])
        if self.worker_slots(f, per_worker) < workers:
            return False
        if rack is RackAffinity.required:
            key = (f, per_worker)
            best = self.rack_slots.get(key)
            if best is None:
                per_rack: dict[str, int] = {}
                for n in members:
                    per_rack[self.racks[n]] = per_rack.get(self.racks[n], 0) + (self.size[n] // per_worker)
                best = max(per_rack.values(), default=0)
                self.rack_slots[key] = best
            return best >= workers
        return True

    def find(self, job: PendingJob) -> Fit | None:
        per_worker, workers = job.gpus_per_worker, job.workers
        buckets = self.buckets.get(job.flavor)
        if buckets is None or self.free_total.get(job.flavor, 0) < job.gpus:
            return None
        if job.rack is RackAffinity.none or workers == 1:
            fit: Fit = []
            for count in range(per_worker, len(buckets)):
                for node in buckets[count]:
                    slots = count // per_worker
                    while slots and len(fit) < workers:
                        fit.append((node, per_worker))
                        slots -= 1
                    if len(fit) == workers:
                        return fit
            return None
        counts = self.counts()
        return fit_on_counts(counts, self.flavor_nodes[job.flavor], self.racks, workers, per_worker, job.rack)

    # ------------------------------------------------------------ changes

    def _move(self, node: int, before: int) -> None:
        buckets = self.buckets[self.node_flavor[node]]
        del buckets[before][node]
        buckets[len(self.free[node])][node] = None

    def take(self, node: int, gpus: int) -> tuple[int, ...]:
        """Take the `gpus` lowest free indices of `node`."""
        free = self.free[node]
        before = len(free)
        taken = tuple(free[:gpus])
        del free[:gpus]
        self.free_total[self.node_flavor[node]] -= gpus
        self._move(node, before)
        return taken

    def take_exact(self, node: int, indices: tuple[int, ...]) -> None:
        free = self.free[node]
        before = len(free)
        wanted = set(indices)
        self.free[node] = [g for g in free if g not in wanted]
        removed = before - len(self.free[node])
        self.free_total[self.node_flavor[node]] -= removed
        self._move(node, before)

    def give(self, node: int, indices: tuple[int, ...]) -> None:
        free = self.free[node]
        before = len(free)
        free.extend(indices)
        free.sort()
        self.free_total[self.node_flavor[node]] += len(indices)
        self._move(node, before)

    def allocate(self, fit: Fit) -> tuple[Slot, ...]:
        return tuple(
            Slot(worker, self.names[node], self.take(node, gpus)) for worker, (node, gpus) in enumerate(fit)
        )

    def is_free(self, node: int, indices: tuple[int, ...]) -> bool:
        free = self.free[node]
        return all(g in free for g in indices)
