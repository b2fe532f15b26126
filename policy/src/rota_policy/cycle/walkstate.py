"""The state that phases 2-5 of one cycle (`walk`) carry from one job's turn to the next, and
the one seam through which the walk's shortcuts (`cycle.fast`) see it: `FastPath`."""

from __future__ import annotations

from collections.abc import Callable

from rota_policy.cycle.state import Cycle, Planner
from rota_policy.model.keys import LaneKey
from rota_policy.model.snapshot import PendingJob, PendingQueue
from rota_policy.nominate.ordering import QueueWalk

__all__ = ["REFERENCE", "FastPath", "WalkState"]


class FastPath:
    """What the walk tells its shortcuts, and the only place it asks them anything. This base is
    the reference: it takes no shortcut, so every job gets its own turn. `cycle.fast.Shortcuts`
    answers the same questions from the ladder's rungs, for many turns at once; the tests check
    that both decide the same (DECISIONS 20)."""

    __slots__ = ()

    def hopeless(self, w: WalkState) -> Callable[[PendingQueue], bool] | None:
        """A test that drops a queue none of whose jobs can start, preempt or reserve; None: none."""
        return None

    def before_turn(self, w: WalkState, group: int, order: QueueWalk) -> None:
        """A job's turn is about to come (the current head of `order`)."""

    def changed(self, w: WalkState, group: int, order: QueueWalk) -> None:
        """The walk admitted a job or tried a search for victims: fewer GPUs may be free."""

    def reserved(self, w: WalkState, job: PendingJob, missed: int, group: int, order: QueueWalk) -> None:
        """`job` waits on a backfill reservation, the `missed`-th blocked job of its lane."""

    def finish(self, w: WalkState) -> bool:
        """The walk is over: False if a shortcut taken may have changed a decision, and the
        cycle must be decided again without it."""
        return True


REFERENCE = FastPath()


class WalkState:
    """What the walk has done so far this cycle, beyond what `Cycle` records."""

    __slots__ = (
        "all_blocked",
        "attempts",
        "blocked_flavors",
        "cy",
        "depth",
        "dynamic",
        "fast",
        "key",
        "limit",
        "misses",
        "planner",
        "ready",
    )

    def __init__(self, cy: Cycle, fast: FastPath = REFERENCE) -> None:
        rules, config = cy.rules, cy.config
        self.cy = cy
        self.fast = fast
        """The shortcuts this walk may take (`REFERENCE`: none)."""
        self.key: Callable[[PendingJob], float] = cy.order_key()
        self.dynamic = rules.order == "score" and cy.scorer.dynamic
        self.limit = rules.reservations if rules.reservations is not None else config.backfill_reservations
        """Reservations per flavor."""
        self.planner: Planner | None = rules.planner if config.preemption else None
        self.attempts = config.max_preemption_attempts if self.planner is not None else 0
        """Preemption attempts left this cycle."""
        self.ready = {job_id for job_id, target in cy.in_flight.planned.items() if target is not None}
        """Preemptors whose plan's GPUs are all held, and that have not had their turn yet."""
        self.blocked_flavors: set[str] = set()
        """Flavors where a blocked job holds the line (policies without backfill)."""
        self.all_blocked = False
        """A blocked job holds the line for every flavor (submit order without backfill)."""
        self.misses: dict[LaneKey, int] = {}
        """Blocked jobs tried per lane: the window (`Rules.per_queue_depth`)."""
        self.depth = rules.per_queue_depth

    def reservations_full(self, flavor: str) -> bool:
        book = self.cy.capacity.books.get(flavor)
        return book is not None and len(book.reservations) >= self.limit

    def quota_version(self) -> int:
        return self.cy.capacity.quota.version

    def held_back(self, job: PendingJob) -> bool:
        """Whether a reservation keeps `job` from starting now (the ladder's reservation rung).
        Within a cycle reservations are only added and their spare only shrinks, so a job
        held back stays held back."""
        if job.share:
            return False  # room on a GPU already shared may open later in the cycle, and takes no whole GPU
        if job.fallback:
            return all(self.held_back(job.on(f)) for f in job.flavors)
        book = self.cy.capacity.books.get(job.flavor)
        return book is not None and book.blocking(job.gpus, self.cy.now + self.cy.runtime(job)) is not None

    def holds_back_all(self, flavor: str, gpus: int, runtime_s: float) -> bool:
        """Whether a reservation keeps from starting now every job of `flavor` that needs at
        least `gpus` and is expected to run at least `runtime_s` (0 or less: any runtime)."""
        book = self.cy.capacity.books.get(flavor)
        return book is not None and book.blocking(gpus, self.cy.now + max(runtime_s, 0.0)) is not None

    def room(self, q: PendingQueue) -> int:
        """The most GPUs a job of `q` could start on now: free, and allowed by quota. Both only
        shrink within a cycle, and quota refuses every size above one it refuses, so the largest
        size allowed is found by bisection, and a job above it stays unable to start."""
        if q.fallback:  # a job of it may start on any flavor its jobs accept
            room = max(self._room(q.team, f) for f in (q.flavor, *(q.fallback or ())))
        else:
            room = self._room(q.team, q.flavor)
        # A share (one GPU at most, as every count reads it) may start on a GPU already
        # shared with no GPU free, or within quota by its fraction: it keeps its turn.
        return max(room, 1) if q.shares else room

    def _room(self, team: str, flavor: str) -> int:
        cy = self.cy
        quota, free = cy.capacity.quota, cy.capacity.state.free_total.get(flavor, 0)
        if not cy.rules.quotas or free <= 0 or quota.allows(team, flavor, free):
            return free
        allowed, refused = 0, free
        while refused - allowed > 1:
            mid = (allowed + refused) // 2
            if quota.allows(team, flavor, mid):
                allowed = mid
            else:
                refused = mid
        return allowed

    def count_miss(self, job: PendingJob, order: QueueWalk) -> int:
        """Count a blocked job against its lane's window; past it, narrow the lane to the jobs
        that could start (DECISIONS 27). Returns the lane's count."""
        qkey = LaneKey(job.tier, job.team, job.flavor)
        missed = self.misses[qkey] = self.misses.get(qkey, 0) + 1
        if missed >= self.depth:
            order.narrow_current()
        return missed

    def nothing_left(self) -> bool:
        """No job further on can start, preempt or reserve this cycle."""
        cy = self.cy
        return (
            self.attempts <= 0
            and not self.ready
            and not any(cy.capacity.state.free_total.values())
            and not (cy.shares and cy.capacity.state.parts)
            and (cy.rules.backfill != "reserve"
                 or all(map(self.reservations_full, cy.capacity.state.layout.flavors)))
        )
