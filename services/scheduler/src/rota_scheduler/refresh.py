"""Re-explaining every pending job, a slice per cycle.

A job's reasons and ETA drift as the cluster changes around it, so every pending job is asked
about again now and then. Asking about all of them in one cycle takes seconds of CPU with a
deep queue (about 2.7 s at 100,000 pending), and a job that fits and arrives meanwhile waits
for that cycle to end. So a pass over the queue goes a slice per cycle instead: no cycle is
much longer than one that admits, and a pass costs at most `duty` of a core over its length.

A pass starts again as soon as the previous one has ended if anything changed meanwhile (the
view's change count moved: a run ended, a job arrived, GPUs were granted), and otherwise every
`interval_s`, for the ETAs that drift with time alone. With a queue that fits in one slice,
every job is asked about again in the first cycle after a change that the duty allows.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable


class RefreshPass:
    """Which pending jobs a cycle asks about again. The caller reports each slice's CPU
    (`spent`), and the next slice waits until the pass stays within `duty` of a core."""

    def __init__(self, interval_s: float, duty: float, slice_size: int) -> None:
        self.interval_s = interval_s
        """A pass starts at most this often, however cheap it is."""
        self.duty = duty
        self.slice_size = slice_size
        self._todo: deque[str] = deque()
        self._pass_started: float | None = None
        self._next_slice_at = 0.0
        self._pass_changes: int | None = None
        """The view's change count when the current (or last) pass started."""

    @property
    def in_pass(self) -> bool:
        return bool(self._todo)

    def take(self, epoch: float, pending: Callable[[], Iterable[str]],
             still_pending: Callable[[str], bool], room: int,
             changes: int | None = None) -> list[str]:
        """The next slice, at most `room` jobs, or none if it is not yet time. A new pass
        takes the pending jobs as they are now (`pending`, in queue order); a job that
        stopped waiting since is passed over (`still_pending`). `changes`: the view's change
        count; a pass starts before its interval when it moved since the last one started."""
        if room <= 0 or epoch < self._next_slice_at:
            return []
        if not self._todo:
            changed = changes is not None and changes != self._pass_changes
            if (self._pass_started is not None and epoch - self._pass_started < self.interval_s
                    and not changed):
                return []
            self._todo.extend(pending())
            self._pass_started = epoch
            self._pass_changes = changes
        taken: list[str] = []
        limit = min(room, self.slice_size)
        while self._todo and len(taken) < limit:
            job_id = self._todo.popleft()
            if still_pending(job_id):
                taken.append(job_id)
        return taken

    def spent(self, epoch: float, cpu_s: float) -> None:
        """A cycle that took a slice cost `cpu_s`: the next slice comes no sooner than
        `cpu_s / duty` from now."""
        self._next_slice_at = epoch + cpu_s / self.duty
