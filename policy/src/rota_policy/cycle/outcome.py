"""What one cycle has decided so far, and why the jobs it looked at wait: the admissions and
plans it returns, and the blocks phase 6 (`explain`) reads."""

from __future__ import annotations

from collections.abc import Container

from rota.contracts.messages import WaitReasonCode as Code

from rota_policy.admission.block import NO_ETA, Block
from rota_policy.model.decisions import Admission, PreemptionPlan
from rota_policy.model.snapshot import PendingJob

__all__ = ["Outcome"]


class Outcome:
    """The cycle's decisions as they are made, with the block of each job that waits."""

    __slots__ = (
        "_block_cache",
        "abandoned",
        "admissions",
        "admitted_jobs",
        "asked",
        "block_flavor",
        "blocks",
        "deferred",
        "head_of_line",
        "no_eta",
        "plans",
        "preemptors",
    )

    def __init__(self, asked: Container[str]) -> None:
        self.admissions: list[Admission] = []
        self.admitted_jobs: list[PendingJob] = []
        """The jobs behind `admissions`, in order: their GPUs come back after their runtime."""
        self.plans: list[PreemptionPlan] = []
        self.preemptors: list[PendingJob] = []
        """The jobs behind `plans`, in order: their quota is taken (explain's ETAs)."""
        self.abandoned: list[str] = []
        """Preemptors whose plan in flight was given up."""
        self.deferred: dict[str, float] = {}
        """Jobs that would have searched for victims but for their tier's preemption delay,
        and when it ends."""
        self.blocks: dict[str, Block] = {}
        self.block_flavor: dict[str, str] = {}
        """For a job that accepts several flavors, the flavor its block is about."""
        self.no_eta: list[PendingJob] = []
        """Blocked jobs that get no ETA: explain leaves them out of the fluid ahead of others."""
        self.head_of_line = ""
        """The job that blocks all behind it, under policies without backfill."""
        self.asked = asked
        """The jobs explain will answer for (`Snapshot.explain`)."""
        self._block_cache: dict[tuple[Code, str], Block] = {}

    def block(self, job: PendingJob, code: Code, detail: str = "") -> None:
        """Record why `job` waits, if explain will need it."""
        if code in NO_ETA:
            self.no_eta.append(job)
        elif code is not Code.WAITING_FOR_PREEMPTION and job.job_id not in self.asked:
            # Explain treats this job as one with no block unless it is asked about: only its
            # reason would differ, and nobody asks for it (a replay asks about new jobs only).
            return
        self.blocks[job.job_id] = self.shared_block(code, detail)

    def record(self, job: PendingJob, block: Block) -> None:
        """`block(job, block.code, block.detail)` for a block already made (the ladder's)."""
        code = block.code
        if code in NO_ETA:
            self.no_eta.append(job)
        elif code is not Code.WAITING_FOR_PREEMPTION and job.job_id not in self.asked:
            return
        self.blocks[job.job_id] = block

    def record_on(self, job: PendingJob, flavor: str, block: Block) -> None:
        """`record` for a job that accepts several flavors, whose block is about `flavor`."""
        self.record(job, block)
        if job.job_id in self.blocks:
            self.block_flavor[job.job_id] = flavor

    def shared_block(self, code: Code, detail: str = "") -> Block:
        """Blocks are immutable and a cycle records one per job it looks at, mostly the same
        few: share them."""
        block = self._block_cache.get((code, detail))
        if block is None:
            block = self._block_cache[(code, detail)] = Block(code, detail)
        return block
