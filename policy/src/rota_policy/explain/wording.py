"""How phase 6 words a waiting job's reasons: what it asks for, and the decorations of a
primary reason (an elastic gang, a restart, several flavors, a wider flavor that would start
it, what its ETA rests on). `reasons` decides which reasons apply; this says them."""

from __future__ import annotations

from rota.contracts.messages import WaitReasonCode as Code

from rota_policy.model.decisions import Reason
from rota_policy.model.layout import Layout
from rota_policy.model.snapshot import PendingJob, Restart

__all__ = ["elastic", "in_one", "more", "need_of", "over_flavors", "restarting", "with_wider"]

Details = tuple[tuple[str, int | float | str], ...]


def need_of(job: PendingJob) -> str:
    """What the job asks for, as its reasons say it: "2x8", "8", or a GPU share, "0.5 of one"
    (DECISIONS 66)."""
    if job.share:
        return f"{job.demand:g} of one"
    return f"{job.workers}x{job.gpus_per_worker}" if job.workers > 1 else f"{job.gpus}"


def restarting(restart: Restart, reason: Reason) -> Reason:
    """A job restarting at another size says which and at what size (DECISIONS 81, 82)."""
    return Reason(reason.code, reason.message, (
        *reason.details, ("restart", "grow" if restart.grow else "shrink"),
        ("restart_workers", len(restart.target))))


def elastic(job: PendingJob, reason: Reason) -> Reason:
    """An elastic gang's primary reason says that it is about its min (DECISIONS 71)."""
    return Reason(
        reason.code,
        f"{reason.message} (elastic, {job.workers} to {job.workers_max} workers: it starts at the"
        f" largest size that fits once {job.workers} do; its ETA is for {job.workers})",
        (*reason.details, ("workers_min", job.workers), ("workers_max", job.workers_max)),
    )


def more(reason: Reason, message: str, details: Details) -> Reason:
    """The reason, with what its ETA rests on (or why it has none) said and detailed."""
    return Reason(reason.code, f"{reason.message}; {message}", (*reason.details, *details))


def with_wider(reason: Reason, flavor: str, within: bool) -> Reason:
    """The primary reason, telling that a flavor the job does not list would start it now."""
    how = "within its team's quota" if within else "by borrowing"
    message = f"{reason.message}; it would start now on {flavor} ({how}) if it accepted {flavor}"
    details = (*reason.details, ("wider_flavor", flavor), ("wider_within_quota", "yes" if within else "no"))
    return Reason(reason.code, message, details)


def over_flavors(job: PendingJob, flavor: str, reasons: tuple[Reason, ...]) -> tuple[Reason, ...]:
    """The primary reason of a multi-flavor job says that no flavor it accepts admits it, and
    which one the numbers are about."""
    first = reasons[0]
    accepts = ", ".join(job.flavors)
    message = f"none of its flavors ({accepts}) can start it now; on {flavor}: {first.message}"
    if first.code is Code.WAITING_FOR_PREEMPTION:
        message = f"on {flavor} (it accepts {accepts}): {first.message}"
    details = (*first.details, ("flavor", flavor), ("flavors", "|".join(job.flavors)))
    return (Reason(first.code, message, details), *reasons[1:])


def in_one(layout: Layout, job: PendingJob) -> str:
    """" in one <level>" for a job bound to a level, else ""."""
    levels, hard = layout.chain(job.need)
    return f" in one {levels[-1]}" if hard else ""
