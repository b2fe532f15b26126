"""What depends only on the cluster's layout, never on what is free.

The nodes' names, flavors, racks, topology levels and sizes, and the answers derived from them: per-flavor
capacity and node lists, and, per job shape, whether a gang could ever fit on the empty
cluster. None of it changes while no node is added, removed or resized, so a caller that keeps
a `Layout` from one cycle to the next hands it over in `Snapshot.layout`, and the cycle uses it
only if its key equals the nodes' layout, compared in full: a cycle's result never depends on
what came before, only its cost does (DECISIONS 23).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from rota_policy.model.topology import NODE, RACK, Chain, Need

__all__ = ["Layout", "LayoutKey", "NodeShape", "layout_key", "layout_of"]

LayoutKey = tuple[tuple[str, str, str, int, tuple[tuple[str, str], ...]], ...]
"""Each node's name, flavor, rack, GPUs and topology levels, in node order."""


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
    @property
    def levels(self) -> tuple[tuple[str, str], ...]: ...


def layout_key(nodes: Iterable[NodeShape]) -> LayoutKey:
    return tuple([(n.name, n.flavor, n.rack, n.gpus, n.levels) for n in nodes])


def layout_of(nodes: Iterable[NodeShape], kept: Layout | None = None) -> Layout:
    """`kept` if it is the layout of `nodes`, else a new one."""
    key = layout_key(nodes)
    if kept is not None and kept.key == key:
        return kept
    return Layout(key)


class Layout:
    """Read-only once built, but for its memos, which are pure functions of the key."""

    __slots__ = (
        "_chains",
        "_domain_slots",
        "_domains",
        "_empty_slots",
        "_fit_ever",
        "capacity",
        "declared",
        "flavor_nodes",
        "flavors",
        "index",
        "key",
        "levels",
        "max_node",
        "names",
        "node_flavor",
        "racks",
        "size",
    )

    def __init__(self, key: LayoutKey) -> None:
        self.key = key
        self.names = [k[0] for k in key]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.node_flavor = [k[1] for k in key]
        self.racks = [k[2] for k in key]
        self.size = [k[3] for k in key]
        self.declared = any(k[4] for k in key)
        """Whether the cluster declares topology levels; if not, `rack` is the one level."""
        levels: list[str] = []
        for k in key:
            levels.extend(name for name, _ in k[4] if name not in levels)
        self.levels: tuple[str, ...] = (*levels, NODE) if self.declared else (RACK, NODE)
        """Every level, outermost first, the node last."""
        self._domains: dict[str, list[str]] = {RACK: self.racks, NODE: self.names}
        for level in levels:
            # A node without a value for a level is a domain of its own there.
            self._domains[level] = [dict(k[4]).get(level, "\0" + k[0]) for k in key]
        self.capacity: dict[str, int] = {}
        self.max_node: dict[str, int] = {}
        self.flavor_nodes: dict[str, list[int]] = {}
        for i, (_, f, _, gpus, _) in enumerate(key):
            self.capacity[f] = self.capacity.get(f, 0) + gpus
            self.max_node[f] = max(self.max_node.get(f, 0), gpus)
            self.flavor_nodes.setdefault(f, []).append(i)
        self.flavors = frozenset(self.capacity)
        self._domain_slots: dict[tuple[str, int, str], int] = {}
        """The most workers of a given size one domain of a level can ever host."""
        self._empty_slots: dict[tuple[str, int], int] = {}
        self._fit_ever: dict[tuple[str, int, int, Need], bool] = {}
        self._chains: dict[Need, Chain] = {}

    def domains(self, level: str) -> list[str]:
        """Each node's domain at `level`; a level the cluster does not declare puts every node
        in a domain of its own (as `node`)."""
        return self._domains.get(level, self.names)

    def chain(self, need: Need) -> Chain:
        """The levels a gang of this need tries, innermost first, and whether the last is a hard
        stop. A cluster that declares levels places a job that asks for none as if it preferred
        the innermost declared level, keeping larger domains whole (DECISIONS 62)."""
        found = self._chains.get(need)
        if found is None:
            found = self._chains[need] = self._make_chain(need)
        return found

    def _make_chain(self, need: Need) -> Chain:
        required, preferred = need
        if required is None and preferred is None:
            if not self.declared:
                return ((), False)
            # The innermost declared level; the node is no domain worth preferring: best-fit packs it.
            preferred = self.levels[-2]
        if preferred is None or preferred == required or preferred not in self.levels:
            return ((required,), True) if required is not None else ((), False)
        start = self.levels.index(preferred)
        stop = self.levels.index(required) if required in self.levels else -1
        if required is not None and (stop < 0 or stop > start):
            return ((required,), True)  # preferring an outer level than required adds nothing
        tried = tuple(reversed(self.levels[max(stop, 0):start + 1]))
        return (tried, True) if required is not None else (tried, False)

    def worker_slots(self, flavor: str, gpus_per_worker: int) -> int:
        """How many workers of this size the flavor's nodes hold when empty (memoized: a walk
        asks this for every pending job, and the answer depends only on the cluster's shape)."""
        key = (flavor, gpus_per_worker)
        slots = self._empty_slots.get(key)
        if slots is None:
            slots = sum(self.size[n] // gpus_per_worker for n in self.flavor_nodes.get(flavor, []))
            self._empty_slots[key] = slots
        return slots

    def shape_fits(self, flavor: str, workers: int, per_worker: int, need: Need) -> bool:
        """Would a gang of this shape fit on the empty cluster? False means EXCEEDS_CLUSTER
        (memoized per shape: the walk asks for every job it looks at)."""
        shape = (flavor, workers, per_worker, need)
        fits = self._fit_ever.get(shape)
        if fits is None:
            fits = self._fit_ever[shape] = self._can_ever_fit(*shape)
        return fits

    def _can_ever_fit(self, f: str, workers: int, per_worker: int, need: Need) -> bool:
        if per_worker > self.max_node.get(f, 0) or workers * per_worker > self.capacity.get(f, 0):
            return False
        if self.worker_slots(f, per_worker) < workers:
            return False
        levels, hard = self.chain(need)
        return not hard or workers <= self.domain_slots(f, per_worker, levels[-1])

    def domain_slots(self, f: str, per_worker: int, level: str) -> int:
        """The most workers of this size one domain of `level` holds when empty."""
        key = (f, per_worker, level)
        best = self._domain_slots.get(key)
        if best is None:
            per_domain: dict[str, int] = {}
            domains = self.domains(level)
            for n in self.flavor_nodes.get(f, []):
                per_domain[domains[n]] = per_domain.get(domains[n], 0) + self.size[n] // per_worker
            best = self._domain_slots[key] = max(per_domain.values(), default=0)
        return best
