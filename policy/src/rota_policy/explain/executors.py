"""Why a job that no running executor can run waits (`NO_EXECUTOR`), in words that say what
to do. The caller decided which jobs these are (`Snapshot.unrunnable`); the cycle left them out
of every queue's line (`cycle.engine`), so they have no position (0) and no ETA."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from rota.contracts.messages import WaitReasonCode as Code

from rota_policy.model.decisions import PendingExplanation, Reason, ScoreBreakdown
from rota_policy.model.snapshot import NoExecutor, PendingJob, PendingQueue

__all__ = ["held_explanations", "no_executor_reason"]

WHAT_IT_RUNS: Mapping[str, str] = MappingProxyType(
    {"local": "a `local` section (a command)", "kubernetes": "a `kubernetes` section (an image)"})
"""What each backend's executor needs of a job, in words."""

BLOCKER = "no running executor can run it"
"""`details.blocker`: what `rota why` says instead of an ETA."""


def _has(sections: tuple[str, ...]) -> str:
    if not sections:
        return "it has no `local`, `kubernetes` or `sim` section"
    named = ", ".join(f"`{s}`" for s in sections)
    return f"it has only a {named} section" if len(sections) == 1 else f"it has only {named} sections"


def no_executor_reason(why: NoExecutor) -> Reason:
    """NO_EXECUTOR: which sections the job has, what each running executor runs, and what to do."""
    runs = "; ".join(
        f"the {backend} executor runs jobs with {WHAT_IT_RUNS.get(needs, f'a `{needs}` section')}"
        for backend, needs in why.executors)
    wanted = " or ".join(dict.fromkeys(f"`{needs}`" for _, needs in why.executors))
    message = (f"no running executor can run this job: {_has(why.sections)}; {runs}. It starts"
               f" once an executor that can run it is running (`rota up --executor sim` runs"
               f" any job), or cancel it and submit it with a {wanted} section")
    backends = ",".join(dict.fromkeys(backend for backend, _ in why.executors))
    return Reason(Code.NO_EXECUTOR, message, (
        ("executors", backends), ("sections", ",".join(why.sections)), ("blocker", BLOCKER)))


def held_explanations(
    queues: tuple[PendingQueue, ...],
    unrunnable: Mapping[str, NoExecutor],
    wanted: frozenset[str] | None,
    factors: Callable[[PendingJob], ScoreBreakdown],
) -> tuple[PendingExplanation, ...]:
    """An explanation for each held job asked about (`wanted`; None: all), in queue order."""
    reasons: dict[NoExecutor, Reason] = {}
    out: list[PendingExplanation] = []
    for queue in queues:
        for job in queue.jobs:
            why = unrunnable.get(job.job_id)
            if why is None or (wanted is not None and job.job_id not in wanted):
                continue
            reason = reasons.get(why)
            if reason is None:
                reason = reasons[why] = no_executor_reason(why)
            out.append(PendingExplanation(job.job_id, (reason,), None, 0, factors(job)))
    return tuple(out)
