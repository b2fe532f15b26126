"""ETAs and words of waits on a shape (phase 6): fragmentation and topology.

Counting a flavor's free GPUs says when there are enough, not when they are on one node (or in
one domain of the level a gang needs whole): a 1x4 job with 2 + 2 free counts 4 now, and would
be told "now" every cycle until a node frees 4. `ShapeEta` replays running work's expected ends
node by node (scaled as `eta.Eta` scales them) and answers when enough worker slots of the
job's size are free in one domain. One pass per distinct shape per cycle: jobs of the same
shape share the answer.
"""

from __future__ import annotations

from typing import NamedTuple

from rota_policy.admission.placement import ClusterState
from rota_policy.cycle.state import Cycle
from rota_policy.explain.eta import scaled_end
from rota_policy.model.decisions import DetailValue
from rota_policy.model.snapshot import PendingJob, expected_ends

__all__ = ["ShapeEta", "fragmentation", "split_hint"]

class ShapeKey(NamedTuple):
    """What a wait on a shape depends on: jobs of the same key share the answer."""

    flavor: str
    workers: int
    gpus_per_worker: int
    level: str
    """The topology level whose domain must seat the gang, or ""."""
    hard: bool
    """Whether the level is a hard stop."""


class ShapeEta:
    """When one node, or one domain of the level a gang needs whole, has room for the job."""

    def __init__(self, cy: Cycle) -> None:
        self.cy = cy
        self._events: dict[str, list[tuple[float, int, int]]] = {}
        self._found: dict[ShapeKey, float | None] = {}

    def _node_events(self, flavor: str) -> list[tuple[float, int, int]]:
        """(time, node index, GPUs back) for each worker of the flavor's running work, by time.
        Victims already chosen give their GPUs to their preemptor, and shares free a GPU only
        with the others on it: neither counts."""
        found = self._events.get(flavor)
        if found is None:
            cy = self.cy
            now, scale, index = cy.now, cy.snapshot.runtime_scale, cy.capacity.state.layout.index
            taken = cy.capacity.taken
            live = [r for r in cy.capacity.runs_by_flavor.get(flavor, ())
                    if r.run_id not in taken and not r.share]
            found = []
            for run, end in zip(live, expected_ends(live, now, cy.config.default_runtime_s), strict=True):
                at = scaled_end(run.started_at, end, now, scale)
                found.extend((at, index[s.node], len(s.gpus)) for s in run.placement)
            admitted = {j.job_id: j for j in cy.outcome.admitted_jobs}
            for a in cy.outcome.admissions:
                job = admitted.get(a.job_id)
                if job is not None and a.flavor == flavor and not job.share:
                    at = now + cy.runtime(job) * scale
                    found.extend((at, index[s.node], len(s.gpus)) for s in a.placement)
            found.sort()
            self._events[flavor] = found
        return found

    def start(self, job: PendingJob) -> float | None:
        """The first time the job's shape fits on the flavor's nodes, given that nothing else
        starts there; None if running work never frees such room (or the job is a share)."""
        if job.share:
            return None
        state = self.cy.capacity.state
        levels, hard = state.layout.chain(job.need)
        level = levels[-1] if hard else ""
        key = ShapeKey(job.flavor, job.workers, job.gpus_per_worker, level, hard)
        if key not in self._found:
            self._found[key] = self._first_fit(job, level, state)
        return self._found[key]

    def _first_fit(self, job: PendingJob, level: str, state: ClusterState) -> float | None:
        per, workers, now = job.gpus_per_worker, job.workers, self.cy.now
        domains = state.layout.domains(level) if level else None
        counts = state.counts()
        slots: dict[str, int] = {}
        for n in state.layout.flavor_nodes.get(job.flavor, []):
            d = domains[n] if domains is not None else ""
            slots[d] = slots.get(d, 0) + counts[n] // per
        if any(s >= workers for s in slots.values()):
            return now
        for at, node, gpus in self._node_events(job.flavor):
            d = domains[node] if domains is not None else ""
            before = counts[node] // per
            counts[node] += gpus
            gained = counts[node] // per - before
            if gained:
                slots[d] = slots.get(d, 0) + gained
                if slots[d] >= workers:
                    return at
        return None


def split_hint(job: PendingJob, most: int) -> str:
    """What to ask for instead when a one-worker job waits for one node to free its GPUs and
    the most free on one node is `most`: the same GPUs as workers of at most `most`."""
    per = job.gpus_per_worker
    if job.workers != 1 or most <= 0 or most >= per:
        return ""
    size = max(d for d in range(1, most + 1) if per % d == 0)
    return f"; if it can run as {per // size} workers, ask for {per // size} x {size}"


def fragmentation(
    state: ClusterState, job: PendingJob, need: str, free: int
) -> tuple[str, tuple[tuple[str, DetailValue], ...]]:
    """FRAGMENTATION's message: the most free on one node, or which level blocks the job, the
    domain of that level with the most room, and how the free room is spread (Kueue's
    "insufficient unused quota" style)."""
    f = job.flavor
    levels, hard = state.layout.chain(job.need)
    counts = state.counts()
    nodes_of = state.layout.flavor_nodes.get(f, [])
    most = max((counts[n] for n in nodes_of), default=0)
    if not hard:
        spread = "on one node" if job.workers == 1 else f"on each of {job.workers} nodes"
        msg = (f"{free} {f} GPUs are free, but the most free on one node is {most} and it needs"
               f" {job.gpus_per_worker} {spread}{split_hint(job, most)}")
        return msg, (("most_free_on_one_node", most),)
    level = levels[-1]
    domains, per = state.layout.domains(level), job.gpus_per_worker
    room: dict[str, int] = {}
    nodes = 0
    for n in nodes_of:
        slots = counts[n] // per
        if slots:
            room[domains[n]] = room.get(domains[n], 0) + slots
            nodes += 1
    if not room:
        msg = f"{free} {f} GPUs are free, but the most free on one node is {most}, short of {per} a worker"
        return msg, (("level", level), ("most_free_on_one_node", most))
    best, seats = max(room.items(), key=lambda kv: (kv[1], kv[0]))
    msg = (
        f"needs {need} {f} GPUs in one {level}; the {level} with the most room, {best}, seats"
        f" {seats} of {job.workers} workers; {nodes} node(s) with room for a worker are spread"
        f" across {len(room)} {level}(s)"
    )
    return msg, (("level", level), ("best_domain", best), ("best_domain_workers", seats),
                 ("most_free_on_one_node", most))
