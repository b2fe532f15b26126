"""What the running executors can run, folded from their `ExecutorAnnounced`, and which pending
jobs none of them can: the policy leaves those waiting (`NO_EXECUTOR`) instead of admitting
them into a StartRun that would fail. Pure, as the view is: liveness is judged at the cycle's
`now`.

- Keyed by replica: a replica's newer announcement replaces its older one (a restart, perhaps
  with another backend), and one of `replicas` drops the replicas past it.
- An announcement lapses `valid_for_s` after it was made: that replica has gone.
- No live announcement (the first seconds after a start, every executor gone, or one from
  before executors announced): no job is held, as before there was a hold; StartRuns wait
  in their stream for an executor. Holding then would hold every job at each start.
- An executor that runs every job (the simulator) among the live ones: none is held.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rota.contracts import JobSpec
from rota.contracts import messages as m
from rota_policy import NoExecutor, PendingQueue

from rota_scheduler.records import JobRecord

__all__ = ["Announced", "Executors", "sections_of"]

SECTIONS = ("kubernetes", "local", "sim")
"""A job spec's run sections, one per backend."""


@dataclass(frozen=True)
class Announced:
    """One replica's last announcement."""

    backend: str
    needs: str | None
    at: float
    valid_until: float


@dataclass
class Executors:
    replicas: dict[int, Announced] = field(default_factory=dict)

    def announced(self, event: m.ExecutorAnnounced, at: float) -> bool:
        """Fold one announcement; whether what the live replicas run may have changed (False
        for a renewal of a replica still live with the same backend)."""
        known = self.replicas.get(event.replica)
        if known is not None and known.at > at:
            return False  # an older announcement read late: the newer one stands
        self.replicas[event.replica] = Announced(event.backend, event.needs, at,
                                                 at + event.valid_for_s)
        gone = [r for r in self.replicas if r >= event.replicas]
        for replica in gone:
            del self.replicas[replica]
        return bool(gone) or known is None or known.valid_until <= at or (
            (known.backend, known.needs) != (event.backend, event.needs))

    def live(self, now: float) -> list[Announced]:
        return [a for a in self.replicas.values() if a.valid_until > now]

    def unrunnable(self, now: float, queues: Iterable[PendingQueue],
                   jobs: Mapping[str, JobRecord]) -> dict[str, NoExecutor]:
        """The pending jobs that no live executor can run, with why; empty when there is no
        live executor or one runs every job."""
        live = self.live(now)
        # A section this version does not know (a newer backend's) is not held against a job.
        if not live or any(a.needs is None or a.needs not in SECTIONS for a in live):
            return {}
        executors = tuple(sorted({(a.backend, a.needs) for a in live if a.needs is not None}))
        needs = tuple(n for _, n in executors)
        held: dict[str, NoExecutor] = {}
        facts: dict[tuple[str, ...], NoExecutor] = {}
        for queue in queues:
            for job in queue.jobs:
                spec = jobs[job.job_id].spec
                if any(getattr(spec, need) is not None for need in needs):
                    continue
                sections = sections_of(spec)
                why = facts.get(sections)
                if why is None:
                    why = facts[sections] = NoExecutor(sections, executors)
                held[job.job_id] = why
        return held


def sections_of(spec: JobSpec) -> tuple[str, ...]:
    return tuple(s for s in SECTIONS if getattr(spec, s) is not None)
