"""Gang placement: all workers or none, best-fit, with topology levels (rack affinity is the
level `rack`).

Best-fit puts each worker on the node with the fewest free GPUs that still fits it, so whole
nodes stay free for the large gangs that need them. A gang that asks for a level goes to the
domain of that level with the fewest free slots that still seats it, so whole domains stay
free for the gangs that need them (Kueue TAS's BestFit). Nodes are kept in buckets by free
count, which makes the common case (no level asked, none declared) cost O(workers x GPUs per
node).
"""

from __future__ import annotations

from collections.abc import Sequence

from rota_policy.model.layout import Layout, layout_of
from rota_policy.model.snapshot import QUARTERS, NodeState, PendingJob, Slot
from rota_policy.model.topology import Need

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
    layout: Layout,
    workers: int,
    per_worker: int,
    need: Need,
) -> Fit | None:
    """Best-fit over arbitrary free counts (the slow path: preemption trials, topology)."""
    usable = sorted((counts[n], n) for n in nodes if counts[n] >= per_worker)
    if sum(c // per_worker for c, _ in usable) < workers:
        return None
    levels, hard = layout.chain(need)
    for level in levels:
        domains = layout.domains(level)
        by_domain: dict[str, list[int]] = {}
        for _, n in usable:
            by_domain.setdefault(domains[n], []).append(n)
        best: tuple[int, str] | None = None
        for name, members in by_domain.items():
            slots = sum(counts[n] // per_worker for n in members)
            if slots >= workers and (best is None or (slots, name) < best):
                best = (slots, name)
        if best is not None:
            return _fit_nodes(by_domain[best[1]], counts, workers, per_worker)
    if hard:
        return None
    return _fit_nodes([n for _, n in usable], counts, workers, per_worker)


class ClusterState:
    """A mutable working copy of the nodes for one cycle."""

    __slots__ = ("_counts", "buckets", "free", "free_total", "held", "layout", "parts")

    def __init__(self, nodes: tuple[NodeState, ...], layout: Layout | None = None) -> None:
        """`layout`, if given, is used only if it is the layout of `nodes` (compared in full)."""
        self.layout = layout_of(nodes, layout)
        free = self.free = [list(n.free) for n in nodes]
        self._counts = [len(f) for f in free]
        """Free GPUs per node index, kept as `free` changes (`counts`)."""
        self.parts: dict[int, dict[int, int]] = {i: dict(n.shared) for i, n in enumerate(nodes) if n.shared}
        """Per node index with GPUs that shares hold in part: GPU index -> quarters held."""
        self.held: set[tuple[int, int]] = set()
        """Shared GPUs (node index, GPU index) that a plan's target names: no new share joins
        them this cycle, so the room its victims leave stays for its preemptor (DECISIONS 84)."""
        self.free_total: dict[str, int] = {}
        self.buckets: dict[str, list[dict[int, None]]] = {}
        max_node = self.layout.max_node
        for f, members in self.layout.flavor_nodes.items():
            buckets: list[dict[int, None]] = [{} for _ in range(max_node[f] + 1)]
            total = 0
            for i in members:
                count = len(free[i])
                buckets[count][i] = None
                total += count
            self.buckets[f] = buckets
            self.free_total[f] = total

    # ------------------------------------------------------------ queries

    def counts(self) -> list[int]:
        """Free GPUs per node index: a copy, which the caller may change."""
        return self._counts.copy()

    def free_on(self, flavor: str) -> int:
        return self.free_total.get(flavor, 0)

    def can_ever_fit(self, job: PendingJob) -> bool:
        """Would the job fit on an empty cluster? False means EXCEEDS_CLUSTER."""
        return self.layout.shape_fits(job.flavor, job.workers, job.gpus_per_worker, job.need)

    def shape_fits(self, flavor: str, workers: int, per_worker: int, need: Need) -> bool:
        """`can_ever_fit` for a job of this shape."""
        return self.layout.shape_fits(flavor, workers, per_worker, need)

    def find(self, job: PendingJob) -> Fit | None:
        per_worker, workers = job.gpus_per_worker, job.workers
        buckets = self.buckets.get(job.flavor)
        if buckets is None or self.free_total.get(job.flavor, 0) < job.gpus:
            return None
        layout = self.layout
        if not layout.declared and (workers == 1 or not layout.chain(job.need)[0]):
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
        nodes = layout.flavor_nodes[job.flavor]
        return fit_on_counts(self._counts, nodes, layout, workers, per_worker, job.need)

    def find_share(self, job: PendingJob) -> Fit | None:
        """Where a GPU share goes (DECISIONS 67): onto the GPU already shared that it fills the
        most and still fits (best fit; ties: the lowest node, then GPU, index), else onto a
        free GPU where a 1-GPU job would go (the node with the fewest free GPUs), so that whole
        nodes stay free for gangs. The fit names the node; `allocate` picks the same GPU."""
        room = QUARTERS - job.share
        best: tuple[int, int] | None = None
        node_flavor = self.layout.node_flavor
        kept = self.held
        for node, held in self.parts.items():
            if node_flavor[node] != job.flavor:
                continue
            for gpu, used in held.items():
                if used > room or (kept and (node, gpu) in kept):
                    continue
                if best is None or used > best[0] or (used == best[0] and node < best[1]):
                    best = (used, node)
        if best is not None:
            return [(best[1], 1)]
        return self.find(job)

    def share_room(self, flavor: str, share: int) -> bool:
        """Whether some GPU of `flavor` already shared has room for `share` more quarters."""
        room = QUARTERS - share
        node_flavor = self.layout.node_flavor
        kept = self.held
        return any(
            used <= room and (not kept or (node, gpu) not in kept)
            for node, held in self.parts.items()
            if node_flavor[node] == flavor
            for gpu, used in held.items()
        )

    # ------------------------------------------------------------ changes

    def take_share(self, node: int, share: int) -> int:
        """Book `share` quarters on `node`: on its fullest shared GPU that has room, else on its
        lowest free GPU, which becomes shared (it leaves `free`). Returns the GPU index."""
        held = self.parts.get(node)
        room = QUARTERS - share
        if held:
            kept = self.held
            fits = [(-used, gpu) for gpu, used in held.items() if used <= room and (node, gpu) not in kept]
            if fits:
                gpu = min(fits)[1]
                held[gpu] += share
                return gpu
        gpu = self.take(node, 1)[0]
        self.parts.setdefault(node, {})[gpu] = share
        return gpu

    def book_share(self, node: int, gpu: int, share: int) -> bool:
        """Book `share` quarters on GPU `gpu` of `node` (a plan's target), if it is free or has
        room; False if not (its victims have not all stopped)."""
        held = self.parts.get(node)
        if held is not None and gpu in held:
            if held[gpu] + share > QUARTERS:
                return False
            held[gpu] += share
            return True
        if gpu not in self.free[node]:
            return False
        self.take_exact(node, (gpu,))
        self.parts.setdefault(node, {})[gpu] = share
        return True

    def place(self, job: PendingJob, fit: Fit) -> tuple[Slot, ...]:
        """Book the ladder's fit for `job`: its share, or its whole GPUs."""
        return self.allocate_share(fit, job.share) if job.share else self.allocate(fit)

    def allocate_share(self, fit: Fit, share: int) -> tuple[Slot, ...]:
        node = fit[0][0]
        return (Slot(0, self.layout.names[node], (self.take_share(node, share),), share),)

    def _move(self, node: int, before: int) -> None:
        buckets = self.buckets[self.layout.node_flavor[node]]
        del buckets[before][node]
        count = self._counts[node] = len(self.free[node])
        buckets[count][node] = None

    def take(self, node: int, gpus: int) -> tuple[int, ...]:
        """Take the `gpus` lowest free indices of `node`."""
        free = self.free[node]
        before = len(free)
        taken = tuple(free[:gpus])
        del free[:gpus]
        self.free_total[self.layout.node_flavor[node]] -= gpus
        self._move(node, before)
        return taken

    def take_exact(self, node: int, indices: tuple[int, ...]) -> None:
        free = self.free[node]
        before = len(free)
        wanted = set(indices)
        self.free[node] = [g for g in free if g not in wanted]
        removed = before - len(self.free[node])
        self.free_total[self.layout.node_flavor[node]] -= removed
        self._move(node, before)

    def give(self, node: int, indices: tuple[int, ...]) -> None:
        free = self.free[node]
        before = len(free)
        free.extend(indices)
        free.sort()
        self.free_total[self.layout.node_flavor[node]] += len(indices)
        self._move(node, before)

    def allocate(self, fit: Fit) -> tuple[Slot, ...]:
        names = self.layout.names
        return tuple(Slot(w, names[node], self.take(node, gpus)) for w, (node, gpus) in enumerate(fit))

    def is_free(self, node: int, indices: tuple[int, ...]) -> bool:
        free = self.free[node]
        return all(g in free for g in indices)
