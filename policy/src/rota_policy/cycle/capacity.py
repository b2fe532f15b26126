"""What one cycle may still give out, as its phases give it: free GPUs (`ClusterState`), quota,
GPU-hour budgets, backfill reservations, and the runs already taken as victims."""

from __future__ import annotations

from rota_policy.admission.backfill import ReservationBook
from rota_policy.admission.budget import BudgetState
from rota_policy.admission.placement import ClusterState
from rota_policy.admission.quota import QuotaBook
from rota_policy.model.config import PolicyConfig
from rota_policy.model.snapshot import RunningRun, Snapshot

__all__ = ["Capacity"]


class Capacity:
    """The cycle's working copies of the cluster's GPUs, its quotas and budgets, and the
    reservations and victims that claim part of them."""

    __slots__ = (
        "_running", "_runs_by_flavor", "books", "budget", "fresh", "quota", "share_runs", "state", "taken",
    )

    def __init__(self, snapshot: Snapshot, now: float, config: PolicyConfig) -> None:
        self.state = ClusterState(snapshot.nodes, snapshot.layout)
        self.quota = QuotaBook(config, snapshot.running, self.state.layout.capacity, snapshot.in_use)
        self.budget = BudgetState(config, snapshot.budget_used, now)
        self.books: dict[str, ReservationBook] = {}
        """Backfill reservations per flavor, made at the first ask (`Cycle.book`)."""
        self.taken: set[str] = set()
        """Runs that are victims already, of a plan in flight or of one made this cycle."""
        self.fresh: dict[str, int] = {}
        """Per admitted share, 1 if it took a free GPU, 0 if it joined a GPU already shared."""
        self.share_runs: dict[str, list[RunningRun]] = {}
        """Per flavor, the runs that hold GPU shares (filled with `runs_by_flavor`)."""
        self._running = snapshot.running
        self._runs_by_flavor: dict[str, list[RunningRun]] | None = None

    @property
    def runs_by_flavor(self) -> dict[str, list[RunningRun]]:
        """Per flavor, the runs that hold whole GPUs."""
        if self._runs_by_flavor is None:
            running = self._running
            flavors = {run.flavor for run in running}
            out: dict[str, list[RunningRun]] = {}
            if len(flavors) == 1 and not any(r.share for r in running):  # the common case, in one step
                out[flavors.pop()] = list(running)
            else:
                for run in running:
                    if not run.share:  # shares are apart: they free no whole GPU alone (DECISIONS 84)
                        out.setdefault(run.flavor, []).append(run)
                    else:
                        self.share_runs.setdefault(run.flavor, []).append(run)
            self._runs_by_flavor = out
        return self._runs_by_flavor
