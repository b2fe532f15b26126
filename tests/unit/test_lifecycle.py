"""A job's lifecycle (`rota.contracts.lifecycle`) as scenario rows of typed contract messages,
and its invariants as properties. Every row builds real messages (`tests.builders.event`), so a
field renamed in a contract fails here."""

from __future__ import annotations

from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from rota.config import load_config
from rota.contracts import messages as m
from rota.contracts.job import TERMINAL_STATES
from rota.contracts.lifecycle import (
    REQUEUE_REASONS,
    RULES,
    TERMINAL_PHASES,
    Phase,
    next_phase,
    phase_of,
    public_state,
    requeues,
)
from rota.contracts.requests import JobStateName
from rota_scheduler.view import ClusterView
from rota_submission.domain import STATE_EVENTS, apply_event

from tests.builders import EVENT_DEFAULTS, event, message

P = Phase
CONFIG = load_config()

# name, phase before, events in order, cancel requested, phase after
SCENARIOS: list[tuple[str, Phase, list[BaseModel], bool, Phase]] = [
    ("proposed, granted, started", P.PENDING,
     [event(m.AllocationProposed), event(m.AllocationGranted), event(m.RunStarted)], False,
     P.RUNNING),
    ("a rejected proposal waits again", P.PENDING,
     [event(m.AllocationProposed), event(m.AllocationRejected)], False, P.PENDING),
    ("a rejection after a grant takes it back", P.ADMITTED, [event(m.AllocationRejected)], False,
     P.PENDING),
    ("preempted: noticed, stopped, back in its queue", P.RUNNING,
     [event(m.PreemptionNoticed), event(m.RunStopped, reason="preempted")], False, P.PENDING),
    ("lost with its node", P.RUNNING, [event(m.RunStopped, reason="lost")], False, P.PENDING),
    ("resized to grow", P.RUNNING, [event(m.RunStopped, reason="resized")], False, P.PENDING),
    ("drained", P.PREEMPTING, [event(m.RunStopped, reason="drained")], False, P.PENDING),
    ("stopped at its deadline", P.RUNNING, [event(m.RunStopped, reason="deadline")], False,
     P.CANCELLED),
    ("an aborted plan leaves its victim running", P.PREEMPTING,
     [event(m.PreemptionCompleted, aborted=True)], False, P.RUNNING),
    ("a plan carried out leaves its victim stopping", P.PREEMPTING,
     [event(m.PreemptionCompleted)], False, P.PREEMPTING),
    ("finished", P.RUNNING, [event(m.RunFinished)], False, P.FINISHED),
    ("failed while being preempted", P.PREEMPTING, [event(m.RunFailed)], False, P.FAILED),
    ("cancelled while waiting", P.PENDING, [event(m.JobCancelled)], False, P.CANCELLED),
    ("cancelled while running: runs until stopped", P.RUNNING, [event(m.JobCancelled)], True,
     P.RUNNING),
    ("cancelled, then its run stopped", P.RUNNING,
     [event(m.JobCancelled), event(m.RunStopped, reason="cancelled")], True, P.CANCELLED),
    ("cancelled, then preempted: never back in its queue", P.RUNNING,
     [event(m.JobCancelled), event(m.RunStopped, reason="preempted")], True, P.CANCELLED),
    ("cancelled while proposed, then rejected", P.PROPOSED,
     [event(m.JobCancelled), event(m.AllocationRejected)], True, P.CANCELLED),
    ("a notice to a job still waiting moves nothing", P.PENDING, [event(m.PreemptionNoticed)],
     False, P.PENDING),
    ("a checkpoint, a wait, a release move nothing", P.RUNNING,
     [event(m.RunCheckpointed), event(m.JobPending), event(m.AllocationReleased)], False,
     P.RUNNING),
    ("a late start after the end", P.FINISHED, [event(m.RunStarted)], False, P.FINISHED),
    ("a late grant after a cancel", P.CANCELLED, [event(m.AllocationGranted)], False,
     P.CANCELLED),
]


@pytest.mark.parametrize(("name", "before", "events", "cancel", "after"), SCENARIOS,
                         ids=[row[0] for row in SCENARIOS])
def test_scenarios(name: str, before: Phase, events: list[BaseModel], cancel: bool,
                   after: Phase) -> None:
    phase = before
    for message_ in events:
        phase = next_phase(phase, message_, cancel_requested=cancel)
    assert phase is after


def test_a_renamed_field_fails_the_builders() -> None:
    with pytest.raises(TypeError, match="RunStopped has no field stop_reason"):
        message(m.RunStopped, run_id="r", job_id="j", stop_reason="preempted")


def test_which_stop_reasons_requeue() -> None:
    assert {r.value for r in REQUEUE_REASONS} == {"preempted", "lost", "resized", "drained"}
    assert not requeues(m.StopReason.cancelled) and not requeues(m.StopReason.deadline)


def test_the_public_states_are_the_api_s_and_a_proposal_shows_as_pending() -> None:
    shown = {public_state(p) for p in Phase}
    assert shown == set(get_args(JobStateName))
    assert public_state(P.PROPOSED) == "pending"
    assert {p.value for p in TERMINAL_PHASES} == set(TERMINAL_STATES)
    assert all(public_state(p, cancel_requested=True) == "cancelled" for p in Phase)
    assert all(public_state(phase_of(s)) == s for s in get_args(JobStateName))


def test_every_rule_is_for_an_event_class_of_the_contracts() -> None:
    assert set(RULES) <= set(EVENT_DEFAULTS)


EVENTS = st.one_of(
    st.sampled_from(list(EVENT_DEFAULTS)).map(event),
    st.sampled_from(list(m.StopReason)).map(lambda r: event(m.RunStopped, reason=r)),
    st.booleans().map(lambda aborted: event(m.PreemptionCompleted, aborted=aborted)),
)


@given(st.sampled_from(sorted(TERMINAL_PHASES)), st.lists(EVENTS, max_size=30), st.booleans())
def test_a_terminal_phase_never_changes(phase: Phase, events: list[BaseModel],
                                        cancel: bool) -> None:
    for message_ in events:
        assert next_phase(phase, message_, cancel_requested=cancel) is phase


@given(st.sampled_from([p for p in Phase if p.live]), st.sampled_from(sorted(REQUEUE_REASONS)))
def test_a_requeueing_stop_always_leads_back_to_pending(phase: Phase,
                                                       reason: m.StopReason) -> None:
    assert next_phase(phase, event(m.RunStopped, reason=reason)) is P.PENDING
    assert next_phase(phase, event(m.RunStopped, reason=reason),
                      cancel_requested=True) is P.CANCELLED


@given(st.sampled_from(list(Phase)), st.lists(EVENTS, max_size=30))
def test_a_cancelled_job_never_waits_again(phase: Phase, events: list[BaseModel]) -> None:
    """Once its cancel is asked, a job that has left its queue never goes back to it."""
    left = phase is not P.PENDING
    for message_ in events:
        phase = next_phase(phase, message_, cancel_requested=True)
        left = left or phase is not P.PENDING
        assert not (left and phase is P.PENDING)


@given(st.sampled_from(list(Phase)), EVENTS, st.booleans())
def test_an_event_folded_twice_moves_a_job_once(phase: Phase, message_: BaseModel,
                                                cancel: bool) -> None:
    """A redelivered event leaves the phase where its first delivery left it."""
    once = next_phase(phase, message_, cancel_requested=cancel)
    assert next_phase(once, message_, cancel_requested=cancel) is once


ENDS = range(16, 20)
"""Choices that end the run for good (finished, failed, stopped for good), if it may end."""
CANCEL = 20
"""The choice that cancels the job, whatever else may come next."""
JOB_ID = EVENT_DEFAULTS[m.RunStarted]["job_id"]


def _story(choices: list[int]) -> list[BaseModel]:
    """A job's events as its senders may send them, in order: each choice picks one of what
    may come next (a proposal only for a waiting job, a start only for a granted run, ...)."""
    events: list[BaseModel] = [event(m.JobSubmitted)]
    at, run, cancelled, runs = "waiting", "", False, 0
    for choice in choices:
        go_on: list[tuple[BaseModel, str]] = []
        end: list[tuple[BaseModel, str]] = []
        if at == "waiting":
            runs += 1
            fresh = f"0190b5c2-0000-7000-8000-{runs:012d}"
            go_on.append((event(m.AllocationProposed, run_id=fresh, proposal_id=fresh), "proposed"))
        elif at == "proposed":
            go_on += [(event(m.AllocationGranted, run_id=run, proposal_id=run), "granted"),
                      (event(m.AllocationRejected, run_id=run, proposal_id=run),
                       "ended" if cancelled else "waiting")]
        elif at in ("granted", "running", "noticed"):
            for reason in m.StopReason:
                stop = event(m.RunStopped, run_id=run, reason=reason)
                if requeues(reason) and not cancelled:
                    go_on.append((stop, "waiting"))
                else:
                    end.append((stop, "ended"))
            if at == "granted":
                go_on.append((event(m.RunStarted, run_id=run), "running"))
            else:
                end += [(event(m.RunFinished, run_id=run), "ended"),
                        (event(m.RunFailed, run_id=run), "ended")]
            if at == "running":
                go_on.append((event(m.PreemptionNoticed, run_id=run), "noticed"))
            if at == "noticed":
                victims = [{"run_id": run, "job_id": JOB_ID, "outcome": "aborted"}]
                go_on.append((event(m.PreemptionCompleted, aborted=True, victims=victims),
                              "running"))
        options = end if choice in ENDS and end else go_on or end
        if choice == CANCEL and at != "ended" and not cancelled:  # a cancel, now and then
            options = [(event(m.JobCancelled), "ended" if at == "waiting" else at)]
        if not options:
            break
        chosen, at = options[choice % len(options)]
        cancelled = cancelled or isinstance(chosen, m.JobCancelled)
        if isinstance(chosen, m.AllocationProposed):
            run = chosen.run_id
        events.append(chosen)
    return events


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 20), max_size=40))
def test_the_scheduler_and_the_read_model_agree_on_every_job_s_state(choices: list[int]) -> None:
    """Both fold the same stream through `next_phase`: at every step the scheduler's view, shown
    as the API shows a phase, is the read model's state. (The scheduler does not fold notices,
    a notice for humans: to it a run being preempted is running.)"""
    view = ClusterView(CONFIG)
    state: JobStateName = "pending"
    for at, message_ in enumerate(_story(choices)):
        view.apply(message_, 1_800_000_000.0 + at)
        if type(message_) in STATE_EVENTS:
            state, _ = apply_event(state, message_, JOB_ID)
        [job] = view.jobs.values()
        shown = public_state(job.phase, cancel_requested=job.cancelled)
        assert shown == ("running" if state == "preempting" else state), (message_, job.phase)
