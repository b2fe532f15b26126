"""The preemption saga as pure transitions: state in, state changed in place, effects out.

No I/O here. The coordinator loads a saga under a row lock, calls one transition, writes the
saga back and turns the effects into outbox rows, all in one transaction.

Victim lifecycle (the plan's state is derived from its victims):

    noticed ──ack──────────▶ stop_sent (outcome acked, or shrunk for a shrink) ──run ended──▶ done
       │    ──deadline─────▶ stop_sent (outcome forced) ──run ended──▶ done
       ├──run ended by itself──────────────────────────────────────▶ done (finished)
       ├──stopped without our StopRun──────────────────────────────▶ done (forced)
       └──preemptor cancelled: notice withdrawn────────────────────▶ done (aborted)

A grow (`grow`) is a saga of its own run, not a preemption: its ack ends it `grown`, its stop
says `resized`, its completion is `GrowCompleted`, and a deadline passed withdraws the notice
(the run goes on as it was, `aborted`) instead of forcing a stop that would lose work.

An ack and its StopRun commit together, so "acked" is an outcome, never a resting state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from rota.contracts import Tier
from rota.contracts import messages as m
from rota.contracts.messages import StopReason, VictimOutcome

DRAIN_REASON = "drain"
"""A node drain's plan (DECISIONS 100): its victims stop `drained`, not `preempted`."""
PREEMPTION_STOPS = frozenset({StopReason.preempted, StopReason.drained})


class PlanState(StrEnum):
    noticing = "noticing"  # some victim still has time to acknowledge
    stopping = "stopping"  # every victim was told to stop (or ended); waiting for the runs to end
    completed = "completed"
    aborted = "aborted"


TERMINAL_PLAN_STATES = frozenset({PlanState.completed, PlanState.aborted})


class VictimState(StrEnum):
    noticed = "noticed"
    stop_sent = "stop_sent"
    done = "done"


class RunEnd(StrEnum):
    finished = "finished"
    failed = "failed"
    stopped = "stopped"


class AckVerdict(StrEnum):
    """What became of one `RunCheckpointed` that names a notice. Only `accepted` acts."""

    accepted = "accepted"
    duplicate = "duplicate"          # already acknowledged: the StopRun went out once
    late = "late"                    # after the deadline: the forced stop stands
    withdrawn = "withdrawn"          # the plan was aborted; the run keeps going
    after_end = "after_end"          # the run had already ended
    stale_run = "stale_run"          # another run of the job answered


@dataclass
class Victim:
    plan_id: str
    run_id: str
    job_id: str
    team: str
    queue: Tier
    gpus: int
    job_name: str
    user: str
    resumable: bool
    last_checkpoint_uri: str | None
    expected_lost_gpu_seconds: float
    notice_id: str
    grace_s: float
    deadline: datetime
    shrink_to: int | None = None
    """An elastic victim shrunk instead of stopped: the workers it restarts with (DECISIONS 81)."""
    grow_to: int | None = None
    """A growing run, no victim: the workers it restarts with (DECISIONS 82)."""
    gpu_share: float | None = None
    """A GPU share stopped: the fraction of its one GPU it frees, with `gpus` 0 (DECISIONS 86)."""
    state: VictimState = VictimState.noticed
    outcome: VictimOutcome | None = None
    checkpoint_uri: str | None = None
    lost_gpu_seconds: float = 0.0
    noticed_at: datetime | None = None
    acked_at: datetime | None = None
    stop_sent_at: datetime | None = None
    done_at: datetime | None = None

    def finish(self, outcome: VictimOutcome, now: datetime) -> None:
        self.state, self.outcome, self.done_at = VictimState.done, outcome, now


@dataclass
class Plan:
    plan_id: str
    preemptor_job_id: str
    preemptor_queue: Tier
    preemptor_team: str | None
    reason: str
    message: str
    state: PlanState
    created_at: datetime
    completed_at: datetime | None = None
    node: str | None = None
    """A drain's node (DECISIONS 100), for the notices sent as the saga opens; not stored."""


@dataclass
class Saga:
    plan: Plan
    victims: list[Victim]

    @property
    def open(self) -> bool:
        return self.plan.state not in TERMINAL_PLAN_STATES

    @property
    def grow(self) -> bool:
        """A grow's saga (`grow.start_grow`): one run, which is nobody's victim."""
        return any(v.grow_to for v in self.victims)

    def victim_by_notice(self, notice_id: str) -> Victim | None:
        return next((v for v in self.victims if v.notice_id == notice_id), None)

    def victim_by_run(self, run_id: str) -> Victim | None:
        return next((v for v in self.victims if v.run_id == run_id), None)


# ---------------------------------------------------------------- effects


@dataclass(frozen=True)
class SendNotice:
    """`PreemptionNotice` to the run, and `PreemptionNoticed` for the humans."""

    victim: Victim


@dataclass(frozen=True)
class WithdrawNotice:
    victim: Victim


@dataclass(frozen=True)
class SendStop:
    victim: Victim
    forced: bool


@dataclass(frozen=True)
class PublishCompleted:
    saga: Saga


Effect = SendNotice | WithdrawNotice | SendStop | PublishCompleted


@dataclass(frozen=True)
class RunEnded:
    """One of `RunStopped`, `RunFinished`, `RunFailed`, reduced to what the saga needs."""

    run_id: str
    how: RunEnd
    stop_reason: StopReason | None = None
    checkpoint_uri: str | None = None
    lost_gpu_seconds: float = 0.0

    @classmethod
    def from_event(cls, data: m.RunStopped | m.RunFinished | m.RunFailed) -> RunEnded:
        if isinstance(data, m.RunStopped):
            return cls(data.run_id, RunEnd.stopped, data.reason, data.checkpoint_uri,
                       data.lost_gpu_seconds)
        how = RunEnd.finished if isinstance(data, m.RunFinished) else RunEnd.failed
        return cls(data.run_id, how)


# ---------------------------------------------------------------- rules


def grace_for(queue: Tier, queues: Mapping[Tier, float], default_grace_s: float) -> float:
    """The victim tier's `queues.<tier>.preemption_grace_s`, else `preemption.default_grace_s`."""
    return queues.get(queue, default_grace_s)


# ---------------------------------------------------------------- transitions


def start(
    request: m.PreemptionRequested,
    now: datetime,
    *,
    grace_s: Callable[[Tier], float],
    ended_runs: Mapping[str, RunEnd],
    preemptor_cancelled: bool,
    new_id: Callable[[], str],
) -> tuple[Saga, list[Effect]]:
    """Open a saga for a plan: one notice per live victim.

    `ended_runs` are victim runs already over when the plan arrives (the scheduler's view was
    a moment old): they count as finished and get no notice. A preemptor already cancelled
    opens the saga aborted, so the ledger drops its holds straight away.
    """
    plan = Plan(
        plan_id=request.plan_id, preemptor_job_id=request.preemptor_job_id,
        preemptor_queue=request.preemptor_queue, preemptor_team=request.preemptor_team,
        reason=request.reason, message=request.message, state=PlanState.noticing,
        created_at=now, node=request.node,
    )
    saga = Saga(plan, [])
    seen: set[str] = set()
    for v in request.victims:
        if v.run_id in seen:
            continue  # a run listed twice is still one victim
        seen.add(v.run_id)
        grace = grace_s(v.queue)
        saga.victims.append(Victim(
            plan_id=plan.plan_id, run_id=v.run_id, job_id=v.job_id, team=v.team, queue=v.queue,
            gpus=v.gpus, job_name=v.job_name or f"job-{v.job_id[:8]}", user=v.user or v.team,
            resumable=v.resumable, last_checkpoint_uri=v.last_checkpoint_uri,
            expected_lost_gpu_seconds=v.expected_lost_gpu_seconds, notice_id=new_id(),
            grace_s=grace, deadline=now + timedelta(seconds=grace), shrink_to=v.shrink_to,
            gpu_share=v.gpu_share,
        ))
    effects: list[Effect] = []
    for victim in saga.victims:
        if victim.run_id in ended_runs:
            victim.finish(VictimOutcome.finished, now)
        elif preemptor_cancelled:
            victim.finish(VictimOutcome.aborted, now)
        else:
            victim.noticed_at = now
            effects.append(SendNotice(victim))
    if preemptor_cancelled:
        return saga, [*effects, *_abort(saga, now)]
    return saga, [*effects, *settle(saga, now)]


def acknowledge(
    saga: Saga, *, notice_id: str, run_id: str, checkpoint_uri: str, now: datetime,
) -> tuple[AckVerdict, list[Effect]]:
    """A `RunCheckpointed` answering `notice_id` of this saga, from run `run_id`. The executor
    publishes it only once the run's token checked out, so it is believed as it is."""
    victim = saga.victim_by_notice(notice_id)
    assert victim is not None, "the caller finds the saga by the notice"
    if run_id != victim.run_id:
        return AckVerdict.stale_run, []
    if victim.state is VictimState.noticed:
        # A shrink or a grow that saved in time is its own outcome: it restarts at its size.
        victim.outcome = (VictimOutcome.shrunk if victim.shrink_to
                          else VictimOutcome.grown if victim.grow_to else VictimOutcome.acked)
        victim.checkpoint_uri, victim.acked_at = checkpoint_uri, now
        return AckVerdict.accepted, [*_stop(victim, forced=False, now=now), *settle(saga, now)]
    return {
        VictimOutcome.acked: AckVerdict.duplicate,
        VictimOutcome.shrunk: AckVerdict.duplicate,
        VictimOutcome.grown: AckVerdict.duplicate,
        VictimOutcome.forced: AckVerdict.late,
        VictimOutcome.aborted: AckVerdict.withdrawn,
        VictimOutcome.finished: AckVerdict.after_end,
        None: AckVerdict.after_end,
    }[victim.outcome], []


def deadlines_passed(saga: Saga, now: datetime) -> list[Effect]:
    """Force the stop of every victim whose deadline passed without an acknowledgement."""
    if not saga.open:
        return []
    effects: list[Effect] = []
    for victim in saga.victims:
        if victim.state is VictimState.noticed and victim.deadline <= now:
            if victim.grow_to:  # a grow is nobody's need: the run goes on as it was
                victim.finish(VictimOutcome.aborted, now)
                effects.append(WithdrawNotice(victim))
                continue
            victim.outcome = VictimOutcome.forced
            effects.extend(_stop(victim, forced=True, now=now))
    return [*effects, *settle(saga, now)] if effects else []


def run_ended(saga: Saga, end: RunEnded, now: datetime) -> list[Effect]:
    """The victim's run is over: stopped by the executor, or finished or failed by itself."""
    victim = saga.victim_by_run(end.run_id)
    if victim is None or victim.state is VictimState.done:
        return []
    if end.how is RunEnd.stopped:
        if victim.state is VictimState.noticed:
            # Stopped without our StopRun: a preemption stop with no ack is forced; any other
            # stop (the user cancelled it) ended the run for its own reasons.
            victim.outcome = (VictimOutcome.forced if end.stop_reason in PREEMPTION_STOPS
                              else VictimOutcome.finished)
        victim.lost_gpu_seconds = end.lost_gpu_seconds
        victim.checkpoint_uri = end.checkpoint_uri or victim.checkpoint_uri
    elif victim.state is VictimState.noticed:
        victim.outcome = VictimOutcome.finished
    elif victim.outcome is VictimOutcome.forced:
        # It exited on its own after a forced stop was ordered: no measurement came, so the
        # scheduler's estimate is the best record of the work lost.
        victim.lost_gpu_seconds = victim.expected_lost_gpu_seconds
    assert victim.outcome is not None
    victim.finish(victim.outcome, now)
    return settle(saga, now)


def preemptor_cancelled(saga: Saga, now: datetime) -> list[Effect]:
    """Abort: victims not yet told to stop keep running and their notice is withdrawn."""
    if not saga.open:
        return []
    effects: list[Effect] = []
    for victim in saga.victims:
        if victim.state is VictimState.noticed:
            victim.finish(VictimOutcome.aborted, now)
            effects.append(WithdrawNotice(victim))
    return [*effects, *_abort(saga, now)]


def settle(saga: Saga, now: datetime) -> list[Effect]:
    """Derive the plan's state from its victims; complete it when every victim is done."""
    if not saga.open:
        return []
    states = {v.state for v in saga.victims}
    if states <= {VictimState.done}:
        saga.plan.state, saga.plan.completed_at = PlanState.completed, now
        return [PublishCompleted(saga)]
    saga.plan.state = (PlanState.noticing if VictimState.noticed in states
                       else PlanState.stopping)
    return []


def completed_message(saga: Saga) -> m.PreemptionCompleted:
    return m.PreemptionCompleted(
        plan_id=saga.plan.plan_id, preemptor_job_id=saga.plan.preemptor_job_id,
        aborted=saga.plan.state is PlanState.aborted,
        victims=[
            m.VictimResult(
                run_id=v.run_id, job_id=v.job_id,
                # A victim still stopping in an aborted plan reports what was ordered so far.
                outcome=v.outcome or VictimOutcome.aborted,
                checkpoint_uri=v.checkpoint_uri, lost_gpu_seconds=v.lost_gpu_seconds,
            )
            for v in saga.victims
        ],
    )


def _stop(victim: Victim, *, forced: bool, now: datetime) -> list[Effect]:
    victim.state, victim.stop_sent_at = VictimState.stop_sent, now
    return [SendStop(victim, forced=forced)]


def _abort(saga: Saga, now: datetime) -> list[Effect]:
    saga.plan.state, saga.plan.completed_at = PlanState.aborted, now
    return [PublishCompleted(saga)]
