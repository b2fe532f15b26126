"""What depends only on the cluster's layout, never on what is free.

The nodes' names, flavors, racks and sizes, and the answers derived from them: per-flavor
capacity and node lists, and, per job shape, whether a gang could ever fit on the empty
cluster. None of it changes while no node is added, removed or resized, so a caller that keeps
a `Layout` from one cycle to the next hands it over in `Snapshot.layout`, and the cycle uses it
only if its key equals the nodes' layout, compared in full: a cycle's result never depends on
what came before, only its cost does (DECISIONS 23).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from rota.contracts.job import RackAffinity

__all__ = ["Layout", "LayoutKey", "NodeShape", "layout_key", "layout_of"]

LayoutKey = tuple[tuple[str, str, str, int], ...]
"""Each node's name, flavor, rack and GPUs, in node order."""


class NodeShape(Protocol):
    """What a layout reads of a node (`NodeState` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def flavor(self) -> str: ...
    @property
    def rack(self) -> str: ...
    @property
    def gpus(self) -> int: ...


def layout_key(nodes: Iterable[NodeShape]) -> LayoutKey:
    return tuple([(n.name, n.flavor, n.rack, n.gpus) for n in nodes])


def layout_of(nodes: Iterable[NodeShape], kept: Layout | None = None) -> Layout:
    """`kept` if it is the layout of `nodes`, else a new one."""
    key = layout_key(nodes)
    if kept is not None and kept.key == key:
        return kept
    return Layout(key)


class Layout:
    """Read-only once built, but for its memos, which are pure functions of the key."""

    __slots__ = (
        "_empty_slots",
        "_fit_ever",
        "_rack_slots",
        "capacity",
        "flavor_nodes",
        "flavors",
        "index",
        "key",
        "max_node",
        "names",
        "node_flavor",
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
        self._rack_slots: dict[tuple[str, int], int] = {}
        """The most workers of a given size one rack can ever host, for EXCEEDS_CLUSTER."""
        self._empty_slots: dict[tuple[str, int], int] = {}
        self._fit_ever: dict[tuple[str, int, int, RackAffinity], bool] = {}

    def worker_slots(self, flavor: str, gpus_per_worker: int) -> int:
        """How many workers of this size the flavor's nodes hold when empty (memoized: a walk
        asks this for every pending job, and the answer depends only on the cluster's shape)."""
        key = (flavor, gpus_per_worker)
        slots = self._empty_slots.get(key)
        if slots is None:
            slots = sum(self.size[n] // gpus_per_worker for n in self.flavor_nodes.get(flavor, []))
            self._empty_slots[key] = slots
        return slots

    def shape_fits(self, flavor: str, workers: int, per_worker: int, rack: RackAffinity) -> bool:
        """Would a gang of this shape fit on the empty cluster? False means EXCEEDS_CLUSTER
        (memoized per shape: the walk asks for every job it looks at)."""
        shape = (flavor, workers, per_worker, rack)
        fits = self._fit_ever.get(shape)
        if fits is None:
            fits = self._fit_ever[shape] = self._can_ever_fit(*shape)
        return fits

    def _can_ever_fit(self, f: str, workers: int, per_worker: int, rack: RackAffinity) -> bool:
        if per_worker > self.max_node.get(f, 0) or workers * per_worker > self.capacity.get(f, 0):
            return False
        if self.worker_slots(f, per_worker) < workers:
            return False
        if rack is RackAffinity.required:
            key = (f, per_worker)
            best = self._rack_slots.get(key)
            if best is None:
                per_rack: dict[str, int] = {}
                for n in self.flavor_nodes.get(f, []):
                    per_rack[self.racks[n]] = per_rack.get(self.racks[n], 0) + (self.size[n] // per_worker)
                best = max(per_rack.values(), default=0)
                self._rack_slots[key] = best
            return best >= workers
        return True
