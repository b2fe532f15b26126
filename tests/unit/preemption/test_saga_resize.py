"""A shrink's saga (DECISIONS 81): the same notice, ack, stop and end as any victim's, with the
workers it keeps on its notice and its own outcome, `shrunk`, once it saved in time. A grow's
(DECISIONS 82): the same steps for a run nobody preempts, ending `grown` or withdrawn."""

from __future__ import annotations

from rota.contracts import Tier
from rota.contracts import messages as m
from rota.contracts.job import WorkerPlacement
from rota.contracts.messages import StopReason, VictimOutcome
from rota_preemption import domain, emit
from rota_preemption.domain import (
    AckVerdict,
    Effect,
    PlanState,
    PublishCompleted,
    RunEnd,
    RunEnded,
    Saga,
    SendNotice,
    SendStop,
    WithdrawNotice,
)
from rota_preemption.grow import completed_message as grow_completed
from rota_preemption.grow import start_grow

from tests.unit.preemption.test_saga import T0, at, ids, open_saga, request, uid


def _shrink_request() -> m.PreemptionRequested:
    req = request(2)
    shrunk = req.victims[0].model_copy(update={"shrink_to": 2})
    return req.model_copy(update={"victims": [shrunk, req.victims[1]]})


def test_a_shrunk_victim_that_saves_in_time_is_shrunk_and_the_other_acked() -> None:
    saga, effects = open_saga(_shrink_request())
    notices = [e.victim for e in effects if isinstance(e, SendNotice)]
    assert [v.shrink_to for v in notices] == [2, None]
    shrunk, stopped = saga.victims
    notice = emit.notice(saga, shrunk)
    assert notice.shrink_to == 2 and notice.action == "checkpoint_and_stop"
    assert emit.noticed(saga, shrunk).shrink_to == 2
    assert emit.notice(saga, stopped).shrink_to is None
    for victim in saga.victims:
        verdict, out = domain.acknowledge(saga, notice_id=victim.notice_id, run_id=victim.run_id,
                                          checkpoint_uri="s3://ckpt/new", now=at(5))
        assert verdict is AckVerdict.accepted
        assert any(isinstance(e, SendStop) and not e.forced for e in out)
    again, _ = domain.acknowledge(saga, notice_id=shrunk.notice_id, run_id=shrunk.run_id,
                                  checkpoint_uri="s3://ckpt/new", now=at(6))
    assert again is AckVerdict.duplicate
    for victim in saga.victims:
        domain.run_ended(saga, RunEnded(victim.run_id, RunEnd.stopped, StopReason.preempted,
                                        "s3://ckpt/new"), at(8))
    assert saga.plan.state is PlanState.completed
    assert [v.outcome for v in saga.victims] == [VictimOutcome.shrunk, VictimOutcome.acked]
    result = domain.completed_message(saga).victims
    assert [r.outcome for r in result] == [VictimOutcome.shrunk, VictimOutcome.acked]


def test_a_shrunk_victim_past_its_deadline_is_forced_as_any_victim() -> None:
    saga, _ = open_saga(_shrink_request())
    domain.deadlines_passed(saga, at(3600))
    assert {v.outcome for v in saga.victims} == {VictimOutcome.forced}


def test_a_shrink_victim_omitted_from_json_when_unset() -> None:
    """Additive in v1: a victim without a shrink encodes exactly as before the field."""
    plain = request(1).victims[0]
    assert "shrink_to" not in plain.model_dump(mode="json")
    assert plain.model_copy(update={"shrink_to": 3}).model_dump(mode="json")["shrink_to"] == 3


# ---------------------------------------------------------------- a grow's saga (DECISIONS 82)


def _grow_request() -> m.GrowRequested:
    return m.GrowRequested(
        grow_id=uid(7), job_id=uid(200), run_id=uid(100), team="ml", queue=Tier.training,
        job_name="sweep", user="alice", workers=4, added_gpus=4,
        target=[WorkerPlacement(worker=i, node="node-0", gpus=[2 * i, 2 * i + 1])
                for i in range(4)],
        message="4 idle h100 GPUs: growing from 2 to 4 workers at its next checkpoint",
    )


def _open_grow(*, ended: dict[str, RunEnd] | None = None, cancelled: bool = False
               ) -> tuple[Saga, list[Effect]]:
    return start_grow(_grow_request(), T0, grace_s=30.0, ended_runs=ended or {},
                      cancelled=cancelled, new_id=ids())


def test_a_grow_that_saves_in_time_is_grown_and_its_stop_says_resized() -> None:
    saga, effects = _open_grow()
    assert saga.grow and saga.plan.preemptor_job_id == uid(200)
    [send] = effects
    assert isinstance(send, SendNotice)
    assert emit.notice(saga, send.victim).grow_to == 4
    [victim] = saga.victims
    verdict, out = domain.acknowledge(saga, notice_id=victim.notice_id, run_id=victim.run_id,
                                      checkpoint_uri="s3://ckpt/g", now=at(2))
    assert verdict is AckVerdict.accepted
    [stop] = [e for e in out if isinstance(e, SendStop)]
    order = emit.stop(saga, stop.victim, forced=stop.forced)
    assert order.reason is StopReason.resized and not order.forced
    done = domain.run_ended(saga, RunEnded(victim.run_id, RunEnd.stopped, StopReason.resized,
                                           "s3://ckpt/g"), at(3))
    assert any(isinstance(e, PublishCompleted) for e in done)
    message = grow_completed(saga)
    assert (message.outcome, message.checkpoint_uri) == (VictimOutcome.grown, "s3://ckpt/g")


def test_a_grow_past_its_deadline_is_withdrawn_and_never_forced() -> None:
    saga, _ = _open_grow()
    effects = domain.deadlines_passed(saga, at(31))
    assert not any(isinstance(e, SendStop) for e in effects)
    assert any(isinstance(e, WithdrawNotice) for e in effects)
    assert grow_completed(saga).outcome is VictimOutcome.aborted
    assert saga.plan.state is PlanState.completed


def test_a_grow_of_a_run_already_over_or_a_cancelled_job_sends_no_notice() -> None:
    saga, effects = _open_grow(ended={uid(100): RunEnd.finished})
    assert not any(isinstance(e, SendNotice) for e in effects)
    assert grow_completed(saga).outcome is VictimOutcome.finished
    saga, effects = _open_grow(cancelled=True)
    assert not any(isinstance(e, SendNotice) for e in effects)
    assert grow_completed(saga).outcome is VictimOutcome.aborted
