"""A job's lifecycle: its phases, which stop reasons send it back to its queue, and how each
event moves it (`next_phase`). Pure: every reader of the stream folds the same events through
this one function, the scheduler's view (`rota_scheduler.view`) and the read model behind the
API (`rota_submission.domain`), so that they cannot disagree on where a job is.

    from                         event                                   to
    pending                      AllocationProposed                      proposed
    pending, proposed            AllocationGranted                       admitted
    pending, proposed, admitted  AllocationRejected                      pending
    pending, proposed, admitted  RunStarted                              running
    admitted, running            PreemptionNoticed                       preempting
    preempting                   PreemptionCompleted (aborted)           running
    any live phase               RunStopped (preempted, lost, resized,   pending
                                            drained)
    any live phase               RunStopped (cancelled, deadline)        cancelled
    any live phase               RunFinished, RunFailed                  finished, failed
    pending                      JobCancelled                            cancelled

A cancel of a job whose run holds GPUs is a request (`cancel_requested`): the job stays where
it is until its run stops (the scheduler stops it), and then ends cancelled where it would
have gone back to pending. Terminal phases never change again, so a replay, or a late,
duplicate or out-of-order event, cannot bring a job back.

Which run an event is about is the reader's business: the scheduler folds a run's events only
when that run is the job's current one.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from rota.contracts import messages as m
from rota.contracts.requests import JobStateName


class Phase(StrEnum):
    PENDING = "pending"
    """In its queue, waiting to be placed."""
    PROPOSED = "proposed"
    """The scheduler proposed a placement; the ledger has not answered yet."""
    ADMITTED = "admitted"
    """The ledger granted its GPUs; its run has not started yet."""
    RUNNING = "running"
    PREEMPTING = "preempting"
    """Its run was told to checkpoint and stop (a preemption, a shrink or a drain)."""
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_PHASES

    @property
    def live(self) -> bool:
        return self not in TERMINAL_PHASES


TERMINAL_PHASES: frozenset[Phase] = frozenset({Phase.FINISHED, Phase.FAILED, Phase.CANCELLED})

REQUEUE_REASONS: frozenset[m.StopReason] = frozenset({
    m.StopReason.preempted, m.StopReason.lost, m.StopReason.resized, m.StopReason.drained,
})
"""Stop reasons that send a job back to its queue, to resume from its last checkpoint. Only
`preempted` spends the job's preemption budget: a lost run (its node, or its gang's start), a
resized one (it grows) and a drained one were not stopped for another job."""

BUDGETED_REASON = m.StopReason.preempted
"""The one requeueing stop that counts against the job's preemption budget."""


def requeues(reason: m.StopReason) -> bool:
    """Whether a run stopped for `reason` sends its job back to its queue."""
    return reason in REQUEUE_REASONS


Rule = Callable[[Phase, Any, bool], Phase]
"""How one event class moves a live phase: (phase, event, cancel_requested) → phase."""


def _proposed(phase: Phase, event: m.AllocationProposed, cancel: bool) -> Phase:
    return Phase.PROPOSED if phase is Phase.PENDING else phase


def _granted(phase: Phase, event: m.AllocationGranted, cancel: bool) -> Phase:
    return Phase.ADMITTED if phase in (Phase.PENDING, Phase.PROPOSED) else phase


def _rejected(phase: Phase, event: m.AllocationRejected, cancel: bool) -> Phase:
    # The ledger answers a proposal once; a reader that saw a grant first still takes it back.
    if phase not in (Phase.PENDING, Phase.PROPOSED, Phase.ADMITTED):
        return phase
    return Phase.CANCELLED if cancel else Phase.PENDING


def _started(phase: Phase, event: m.RunStarted, cancel: bool) -> Phase:
    return Phase.RUNNING if phase in (Phase.PENDING, Phase.PROPOSED, Phase.ADMITTED) else phase


def _noticed(phase: Phase, event: m.PreemptionNoticed, cancel: bool) -> Phase:
    return Phase.PREEMPTING if phase in (Phase.ADMITTED, Phase.RUNNING) else phase


def _preemption_completed(phase: Phase, event: m.PreemptionCompleted, cancel: bool) -> Phase:
    # Aborted: its victims were left running (a preemptor is never preempting).
    return Phase.RUNNING if event.aborted and phase is Phase.PREEMPTING else phase


def _finished(phase: Phase, event: m.RunFinished, cancel: bool) -> Phase:
    return Phase.FINISHED


def _failed(phase: Phase, event: m.RunFailed, cancel: bool) -> Phase:
    return Phase.FAILED


def _stopped(phase: Phase, event: m.RunStopped, cancel: bool) -> Phase:
    return Phase.PENDING if requeues(event.reason) and not cancel else Phase.CANCELLED


def _cancelled(phase: Phase, event: m.JobCancelled, cancel: bool) -> Phase:
    # A run that holds GPUs must stop first: the job ends when it does (`cancel_requested`).
    return Phase.CANCELLED if phase is Phase.PENDING else phase


RULES: dict[type[BaseModel], Rule] = {
    m.AllocationProposed: _proposed,
    m.AllocationGranted: _granted,
    m.AllocationRejected: _rejected,
    m.RunStarted: _started,
    m.PreemptionNoticed: _noticed,
    m.PreemptionCompleted: _preemption_completed,
    m.RunFinished: _finished,
    m.RunFailed: _failed,
    m.RunStopped: _stopped,
    m.JobCancelled: _cancelled,
}
"""The events that move a phase, by message class; every other event leaves it alone."""


def next_phase(phase: Phase, event: BaseModel, *, cancel_requested: bool = False) -> Phase:
    """Where `event` moves a job in `phase`. `cancel_requested`: the job was cancelled while
    its run held GPUs, so where it would go back to its queue it ends CANCELLED instead."""
    if phase.terminal:
        return phase
    rule = RULES.get(type(event))
    return phase if rule is None else rule(phase, event, cancel_requested)


def public_state(phase: Phase, *, cancel_requested: bool = False) -> JobStateName:
    """The state the API shows (`JobStateName`): a proposal is still pending to its owner, and
    a job whose cancel was asked is cancelled at once (its run is being stopped)."""
    if cancel_requested or phase is Phase.CANCELLED:
        return "cancelled"
    return _PUBLIC[phase]


def phase_of(state: JobStateName) -> Phase:
    """The phase a public state stands for (a proposal shows as pending)."""
    return Phase(state)


_PUBLIC: dict[Phase, JobStateName] = {
    Phase.PENDING: "pending",
    Phase.PROPOSED: "pending",
    Phase.ADMITTED: "admitted",
    Phase.RUNNING: "running",
    Phase.PREEMPTING: "preempting",
    Phase.FINISHED: "finished",
    Phase.FAILED: "failed",
    Phase.CANCELLED: "cancelled",
}
