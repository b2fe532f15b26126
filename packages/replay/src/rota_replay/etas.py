"""The start estimates a replay records per job, for the ETA metrics.

Two moments: at submission (the cycle that first sees the job), and 10 minutes before its start.
A replay cannot know a start before it happens, so the second moment comes from a first pass:
`probe_times` turns that pass's starts and cycle times into, per job, the last cycle at least
`BEFORE_START_S` before its start; a second, identical pass asks the policy about the job then.

Two estimators at each moment: the policy's own ETA, and what `squeue --start` would print
(`squeue.squeue_start`), from the same state. With the policy's ETA, the primary reason it gave
at submission, and whether a reason named what blocks a job with no ETA (`details.blocker`).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence

from rota.contracts.common import Tier
from rota_policy.model.decisions import Decisions
from rota_policy.model.snapshot import PendingJob, RunningRun

from rota_replay.squeue import squeue_start

__all__ = ["BEFORE_START_S", "EtaLog", "probe_times"]

BEFORE_START_S = 600.0

Queues = Mapping[tuple[Tier, str, str], Sequence[PendingJob]]
SqueueState = tuple[Mapping[str, int], Iterable[RunningRun], Queues]
"""Free GPUs per flavor, the runs, and the pending queues."""


def probe_times(
    starts: Mapping[str, tuple[float, float]], cycle_times: Sequence[float]
) -> dict[str, float]:
    """Per job (`job_id -> (submit, first start)`), the last cycle after its submission and at
    least `BEFORE_START_S` before its start. A job with none (it waited less, or nothing
    happened in between) is left out: its estimate then is the one it got at submission."""
    out: dict[str, float] = {}
    for job_id, (submit, start) in starts.items():
        k = bisect.bisect_right(cycle_times, start - BEFORE_START_S) - 1
        if k >= 0 and cycle_times[k] > submit:
            out[job_id] = cycle_times[k]
    return out


class EtaLog:
    """Estimates per job id; None where the estimator gave none (Rota: a reason with no ETA;
    squeue: N/A)."""

    def __init__(self, probes: Mapping[str, float] | None = None, *, squeue: bool = False) -> None:
        self.squeue = squeue
        self.at_submit: dict[str, float | None] = {}
        self.before_start: dict[str, float | None] = {}
        self.squeue_at_submit: dict[str, float | None] = {}
        self.squeue_before_start: dict[str, float | None] = {}
        self.code_at_submit: dict[str, str] = {}
        """The primary reason code each job got at submission."""
        self.blocker_at_submit: set[str] = set()
        """The jobs that got no ETA at submission but a reason that names their blocker."""
        self._asked = probes is not None
        self._due = sorted((t, job_id) for job_id, t in (probes or {}).items())
        self._next = 0
        self._probing: list[str] = []

    @property
    def probed(self) -> bool:
        """Whether this pass asks about jobs again before their start."""
        return self._asked

    @property
    def probing(self) -> Sequence[str]:
        """The jobs asked about again in the current cycle."""
        return self._probing

    def due(self, t: float) -> list[str]:
        """The jobs to ask about again in the cycle at `t`."""
        due, i = self._due, self._next
        while i < len(due) and due[i][0] <= t:
            i += 1
        self._probing = [job_id for _, job_id in due[self._next : i]]
        self._next = i
        return self._probing

    def record(
        self,
        decisions: Decisions,
        now: float,
        new: Iterable[str],
        pending: Mapping[str, PendingJob],
        state: Callable[[], SqueueState],
        default_limit_s: float,
    ) -> None:
        """After the cycle at `now` is applied: `new` are the jobs it saw first, `pending` the
        jobs still waiting, `state` the free GPUs, runs and queues the squeue estimate reads."""
        explained = {ex.job_id: ex for ex in decisions.pending}
        etas = {job_id: ex.eta for job_id, ex in explained.items()}
        fresh = [job_id for job_id in new if job_id in pending]
        for job_id in fresh:
            self.at_submit[job_id] = etas.get(job_id)
            ex = explained.get(job_id)
            if ex is not None:
                self.code_at_submit[job_id] = ex.primary.value
                if ex.eta is None and any(r.detail("blocker") is not None for r in ex.reasons):
                    self.blocker_at_submit.add(job_id)
        probed = [job_id for job_id in self._probing if job_id in pending]
        for job_id in probed:
            self.before_start[job_id] = etas.get(job_id)
        if not self.squeue or not (fresh or probed):
            return
        free, running, queues = state()
        targets = [pending[job_id] for job_id in (*fresh, *probed)]
        found = squeue_start(now, free, running, queues, targets, default_limit_s)
        for job_id in fresh:
            self.squeue_at_submit[job_id] = found[job_id]
        for job_id in probed:
            self.squeue_before_start[job_id] = found[job_id]
