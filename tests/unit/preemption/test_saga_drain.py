"""A drain's saga (DECISIONS 100): the usual notice, acknowledgement and stop, but the stop
says `drained` (no preemption budget), the notice names the node, and a victim stopped
`drained` without our StopRun is forced, as a preempted one is."""

from __future__ import annotations

from rota.contracts import messages as m
from rota.contracts.messages import StopReason, VictimOutcome
from rota_preemption import domain
from rota_preemption.domain import RunEnd, RunEnded, SendNotice, SendStop
from rota_preemption.emit import noticed, stop

from tests.unit.preemption.test_saga import at, open_saga, request


def drain_request() -> m.PreemptionRequested:
    return request().model_copy(update={"reason": "drain", "node": "gpu-7",
                                        "message": "node gpu-7 is drained (firmware)"})


def test_a_drain_notices_with_its_node_and_stops_drained_after_the_ack() -> None:
    saga, effects = open_saga(drain_request())
    [notice] = [e for e in effects if isinstance(e, SendNotice)]
    told = noticed(saga, notice.victim)
    assert (told.reason, told.node) == ("drain", "gpu-7")
    _, effects = domain.acknowledge(saga, notice_id=notice.victim.notice_id,
                                    run_id=notice.victim.run_id, checkpoint_uri="s3://ckpt/d",
                                    now=at(3))
    [send] = [e for e in effects if isinstance(e, SendStop)]
    order = stop(saga, send.victim, forced=send.forced)
    assert (order.reason, order.forced) == (StopReason.drained, False)


def test_a_drain_without_an_ack_is_forced_at_the_grace_and_its_loss_counted() -> None:
    saga, _ = open_saga(drain_request())
    victim = saga.victims[0]
    [send] = [e for e in domain.deadlines_passed(saga, at(victim.grace_s + 1))
              if isinstance(e, SendStop)]
    assert stop(saga, send.victim, forced=send.forced).reason is StopReason.drained
    assert send.forced
    domain.run_ended(saga, RunEnded(victim.run_id, RunEnd.stopped, StopReason.drained,
                                    lost_gpu_seconds=1234.0), at(victim.grace_s + 2))
    assert (victim.outcome, victim.lost_gpu_seconds) == (VictimOutcome.forced, 1234.0)


def test_a_preemption_for_a_job_still_stops_preempted() -> None:
    saga, effects = open_saga()
    [notice] = [e for e in effects if isinstance(e, SendNotice)]
    assert noticed(saga, notice.victim).node is None
    assert stop(saga, notice.victim, forced=True).reason is StopReason.preempted
