"""A shrink's saga (DECISIONS 81): the same notice, ack, stop and end as any victim's, with the
workers it keeps on its notice and its own outcome, `shrunk`, once it saved in time."""

from __future__ import annotations

from rota.contracts import messages as m
from rota.contracts.messages import StopReason, VictimOutcome
from rota_preemption import domain, emit
from rota_preemption.domain import AckVerdict, PlanState, RunEnd, RunEnded, SendNotice, SendStop

from tests.unit.preemption.test_saga import at, open_saga, request


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
