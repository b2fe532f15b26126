"""What a backend is: the seam between the executor's bookkeeping and the thing that runs jobs.

The executor owns the `runs` table, the outbox and every event. A backend only starts and
stops runs and reports what happened to them through a `Reporter`: `sim`, `local` and
`kubernetes` (kubernetes-asyncio, `kube.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from rota.contracts.job import JobSpec, WorkerPlacement


@dataclass(frozen=True)
class WorkerProcess:
    """One local process of a run (one per gang worker). `start` guards against pid reuse."""

    worker: int
    pid: int
    start: str | None = None

    def to_doc(self) -> dict[str, Any]:
        return {"worker": self.worker, "pid": self.pid, "start": self.start}

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> WorkerProcess:
        return cls(int(doc["worker"]), int(doc["pid"]), doc.get("start"))


@dataclass(frozen=True)
class RunRecord:
    """One row of `executor.runs`, as the backends see it."""

    run_id: str
    job_id: str
    attempt: int
    backend: str
    spec: JobSpec
    placement: list[WorkerPlacement]
    state: str
    started_at: datetime
    resume_from: str | None = None
    processes: list[WorkerProcess] = field(default_factory=list)
    last_checkpoint_uri: str | None = None
    last_checkpoint_at: datetime | None = None
    last_checkpoint_progress_s: float | None = None
    notice_id: str | None = None
    notice_at: datetime | None = None
    notice_acked_at: datetime | None = None
    stop_requested_at: datetime | None = None

    @property
    def gpus(self) -> int:
        return sum(len(w.gpus) for w in self.placement)

    @property
    def live(self) -> bool:
        return self.state in ("running", "stopping")


@dataclass(frozen=True)
class Exit:
    """How a run's process (or simulation) ended. `code` is None when nobody knows it: the
    process vanished while the executor was away, or the backend ended a simulation."""

    code: int | None
    detail: str = ""
    lost: bool = False
    """The backend lost the run through no fault of the job (a node gone, a gang that never
    started): it is reported `RunStopped(lost)`, and the job requeued from its checkpoint."""


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint a backend made itself (the simulator): no token to check, it is ours."""

    uri: str
    at: datetime
    progress_s: float | None = None
    notice_id: str | None = None


class Reporter(Protocol):
    """What backends tell the executor. Each call commits its own transaction."""

    async def launched(self, run_id: str, processes: list[WorkerProcess]) -> None: ...

    async def new_token(self, run_id: str) -> str:
        """A fresh token for a run not launched yet; only its hash is kept."""
        ...

    async def checkpointed(self, run: RunRecord, checkpoint: Checkpoint) -> None: ...

    async def ended(self, run_id: str, exit: Exit) -> None: ...

    async def node_changed(self, node: str, problem: str | None) -> None:
        """A node was withdrawn (`problem`: why), or is usable again (None)."""
        ...

    async def node_drain(self, node: str, deadline_s: float | None, reason: str) -> None:
        """A node is drained (a cordon) with `deadline_s` from now, or its drain ends (None)."""
        ...

    async def run_eviction(self, run_id: str, job_id: str, node: str, pod: str,
                           requester: str, *, withdrawn: bool) -> None:
        """An eviction of a pod of the run was requested (or every request withdrawn)."""
        ...


class Backend(Protocol):
    name: str
    needs: str | None
    """The job spec section this backend needs to run a job (`local`, `kubernetes`); None: it
    runs every job. Announced (`ExecutorAnnounced`) so that the scheduler holds, rather than
    admits, a job that no running executor can run; `unsupported` says the same of one spec."""
    time_scale: float
    """Run seconds per wall second: the sim speed, else 1. Lost work is counted in run time."""

    def unsupported(self, spec: JobSpec) -> str | None:
        """Why this backend cannot run `spec`, or None."""

    async def start(self, run: RunRecord, run_token: str) -> None:
        """Launch a recorded run. Failures are reported through `Reporter.ended`.

        `run_token` is the run's secret, which it shows when it reports a checkpoint. It exists
        only here and in the run's environment: the executor keeps just its hash."""

    async def adopt(self, run: RunRecord) -> None:
        """Take over a live run recorded before a restart of the executor."""

    async def stop(self, run: RunRecord) -> None:
        """Stop a run whose stop is recorded; its end comes through `Reporter.ended`."""

    def noticed(self, run: RunRecord) -> None:
        """The run's notice state changed (a notice, or its withdrawal)."""

    async def run(self) -> None:
        """The backend's loop: advance simulations, or watch processes. Runs until cancelled."""

    async def close(self) -> None: ...
