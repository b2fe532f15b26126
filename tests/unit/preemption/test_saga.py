"""The saga's transitions as named scenarios: each step is an input and the effects it must
produce, then the victims' outcomes and the plan's state at the end. Pure: no I/O, no clock."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from rota.contracts import Tier
from rota.contracts import messages as m
from rota.contracts.messages import StopReason, VictimOutcome
from rota_preemption import domain
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
    VictimState,
    WithdrawNotice,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = {Tier.experiment: 30.0, Tier.training: 120.0}
DEFAULT_GRACE = 300.0


def uid(n: int) -> str:
    return f"00000000-0000-7000-8000-{n:012d}"


def request(victims: int = 1, *, tier: Tier = Tier.experiment, duplicate: bool = False
            ) -> m.PreemptionRequested:
    listed = [
        m.Victim(run_id=uid(100 + i), job_id=uid(200 + i), team="ml", queue=tier, gpus=8,
                 expected_lost_gpu_seconds=600.0, job_name=f"victim-{i}", user="alice",
                 resumable=True, last_checkpoint_uri="s3://ckpt/old")
        for i in range(victims)
    ]
    if duplicate:
        listed.append(listed[0])
    return m.PreemptionRequested(
        plan_id=uid(1), preemptor_job_id=uid(2), preemptor_queue=Tier.production,
        victims=listed, reason="rota:lower-tier", message="production job needs 8 GPUs",
        expected_lost_gpu_seconds=600.0 * victims,
    )


def ids() -> Callable[[], str]:
    counter = itertools.count(900)
    return lambda: uid(next(counter))


def open_saga(req: m.PreemptionRequested | None = None, *, ended: dict[str, RunEnd] | None = None,
              cancelled: bool = False) -> tuple[Saga, list[Effect]]:
    return domain.start(
        req or request(), T0, grace_s=lambda q: domain.grace_for(q, GRACE, DEFAULT_GRACE),
        ended_runs=ended or {}, preemptor_cancelled=cancelled, new_id=ids(),
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def names(effects: list[Effect], saga: Saga) -> list[str]:
    index = {v.run_id: i for i, v in enumerate(saga.victims)}
    out = []
    for e in effects:
        match e:
            case SendNotice(v):
                out.append(f"notice:{index[v.run_id]}")
            case WithdrawNotice(v):
                out.append(f"withdraw:{index[v.run_id]}")
            case SendStop(v, forced):
                out.append(f"stop:{index[v.run_id]}" + (":forced" if forced else ""))
            case PublishCompleted(s):
                out.append("completed" + (":aborted" if s.plan.state is PlanState.aborted else ""))
    return out


# ---------------------------------------------------------------- steps


@dataclass(frozen=True)
class Ack:
    victim: int
    at: float = 5.0
    verdict: AckVerdict = AckVerdict.accepted
    stale: bool = False  # sent by another run of the same job
    uri: str = "s3://ckpt/acked"


@dataclass(frozen=True)
class Tick:
    at: float


@dataclass(frozen=True)
class Ended:
    victim: int
    how: RunEnd
    at: float = 10.0
    reason: StopReason | None = None
    lost: float = 0.0
    uri: str | None = None


@dataclass(frozen=True)
class Cancel:
    at: float = 5.0


Step = Ack | Tick | Ended | Cancel


def apply(saga: Saga, step: Step) -> list[Effect]:
    match step:
        case Ack():
            victim = saga.victims[step.victim]
            verdict, effects = domain.acknowledge(
                saga, notice_id=victim.notice_id, run_id=uid(999) if step.stale else victim.run_id,
                checkpoint_uri=step.uri, now=at(step.at))
            assert verdict is step.verdict
            return effects
        case Tick():
            return domain.deadlines_passed(saga, at(step.at))
        case Ended():
            victim = saga.victims[step.victim]
            end = RunEnded(victim.run_id, step.how, step.reason, step.uri, step.lost)
            return domain.run_ended(saga, end, at(step.at))
        case Cancel():
            return domain.preemptor_cancelled(saga, at(step.at))
    raise AssertionError(step)


STOPPED = StopReason.preempted
A, F, FIN, AB = VictimOutcome.acked, VictimOutcome.forced, VictimOutcome.finished, VictimOutcome.aborted


@dataclass(frozen=True)
class Scenario:
    name: str
    steps: list[tuple[Step, list[str]]]
    outcomes: list[VictimOutcome | None]
    plan: PlanState
    victims: int = 1
    lost: list[float] = field(default_factory=list)
    checkpoints: list[str | None] = field(default_factory=list)


SCENARIOS = [
    Scenario("ack, then the executor stops the run",
             [(Ack(0), ["stop:0"]), (Ended(0, RunEnd.stopped, reason=STOPPED, lost=3.0, uri="s3://ckpt/acked"), ["completed"])],
             [A], PlanState.completed, lost=[3.0], checkpoints=["s3://ckpt/acked"]),
    Scenario("no ack by the deadline: forced stop, lost work recorded",
             [(Tick(29.0), []), (Tick(30.0), ["stop:0:forced"]), (Ended(0, RunEnd.stopped, at=31, reason=STOPPED, lost=1800.0, uri="s3://ckpt/old"), ["completed"])],
             [F], PlanState.completed, lost=[1800.0], checkpoints=["s3://ckpt/old"]),
    Scenario("the victim finishes by itself during the grace period",
             [(Ended(0, RunEnd.finished), ["completed"]), (Tick(60.0), [])],
             [FIN], PlanState.completed, lost=[0.0]),
    Scenario("the victim fails by itself during the grace period",
             [(Ended(0, RunEnd.failed), ["completed"])], [FIN], PlanState.completed),
    Scenario("the preemptor is cancelled during the grace period",
             [(Cancel(), ["withdraw:0", "completed:aborted"]), (Tick(60.0), []),
              (Ack(0, at=61, verdict=AckVerdict.withdrawn), []), (Ended(0, RunEnd.finished, at=90), [])],
             [AB], PlanState.aborted),
    Scenario("duplicate acks: one StopRun",
             [(Ack(0), ["stop:0"]), (Ack(0, at=6, verdict=AckVerdict.duplicate, uri="s3://ckpt/again"), [])],
             [A], PlanState.stopping, checkpoints=["s3://ckpt/acked"]),
    Scenario("an ack after the deadline: the forced stop stands",
             [(Tick(30.0), ["stop:0:forced"]), (Ack(0, at=31, verdict=AckVerdict.late), []),
              (Ended(0, RunEnd.stopped, at=32, reason=STOPPED, lost=900.0), ["completed"])],
             [F], PlanState.completed, lost=[900.0], checkpoints=[None]),
    Scenario("an ack from a stale run of the job is ignored",
             [(Ack(0, stale=True, verdict=AckVerdict.stale_run), []), (Tick(30.0), ["stop:0:forced"])],
             [F], PlanState.stopping),
    Scenario("the executor reports a preemption stop with no ack: forced",
             [(Ended(0, RunEnd.stopped, reason=STOPPED, lost=450.0), ["completed"]), (Tick(30.0), [])],
             [F], PlanState.completed, lost=[450.0]),
    Scenario("the victim is cancelled by its user during the grace period",
             [(Ended(0, RunEnd.stopped, reason=StopReason.cancelled, lost=70.0), ["completed"])],
             [FIN], PlanState.completed, lost=[70.0]),
    Scenario("an ack after the run ended",
             [(Ended(0, RunEnd.finished), ["completed"]), (Ack(0, at=11, verdict=AckVerdict.after_end), [])],
             [FIN], PlanState.completed),
    Scenario("a run that exits by itself after a forced stop keeps the estimated loss",
             [(Tick(30.0), ["stop:0:forced"]), (Ended(0, RunEnd.failed, at=31), ["completed"])],
             [F], PlanState.completed, lost=[600.0]),
    Scenario("a run that exits by itself after its ack lost nothing",
             [(Ack(0), ["stop:0"]), (Ended(0, RunEnd.finished), ["completed"])],
             [A], PlanState.completed, lost=[0.0], checkpoints=["s3://ckpt/acked"]),
    Scenario("two victims: complete only when both runs ended",
             [(Ack(0), ["stop:0"]), (Tick(30.0), ["stop:1:forced"]),
              (Ended(0, RunEnd.stopped, at=31, reason=STOPPED), []),
              (Ended(1, RunEnd.stopped, at=32, reason=STOPPED, lost=60.0), ["completed"])],
             [A, F], PlanState.completed, victims=2, lost=[0.0, 60.0]),
    Scenario("cancelled after one victim acked: only the other keeps running",
             [(Ack(0), ["stop:0"]), (Cancel(at=6), ["withdraw:1", "completed:aborted"]),
              (Ended(0, RunEnd.stopped, at=8, reason=STOPPED, lost=2.0), [])],
             [A, AB], PlanState.aborted, victims=2, lost=[2.0, 0.0]),
    Scenario("cancelled after the plan completed: nothing to undo",
             [(Ack(0), ["stop:0"]), (Ended(0, RunEnd.stopped, reason=STOPPED), ["completed"]), (Cancel(at=12), [])],
             [A], PlanState.completed),
    Scenario("a redelivered run end changes nothing",
             [(Ended(0, RunEnd.finished), ["completed"]), (Ended(0, RunEnd.finished, at=11), [])],
             [FIN], PlanState.completed),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario(scenario: Scenario) -> None:
    saga, effects = open_saga(request(scenario.victims))
    assert names(effects, saga) == [f"notice:{i}" for i in range(scenario.victims)]
    assert saga.plan.state is PlanState.noticing
    for number, (step, expected) in enumerate(scenario.steps):
        assert names(apply(saga, step), saga) == expected, f"step {number}: {step}"
    assert [v.outcome for v in saga.victims] == scenario.outcomes
    assert saga.plan.state is scenario.plan
    if scenario.lost:
        assert [v.lost_gpu_seconds for v in saga.victims] == scenario.lost
    if scenario.checkpoints:
        assert [v.checkpoint_uri for v in saga.victims] == scenario.checkpoints


# ---------------------------------------------------------------- opening a saga


def test_notices_carry_the_victim_tier_grace() -> None:
    saga, _ = open_saga(request(tier=Tier.training))
    assert saga.victims[0].grace_s == 120.0
    assert saga.victims[0].deadline == at(120.0)
    saga, _ = open_saga(request(tier=Tier.production))  # not configured: the default grace
    assert saga.victims[0].deadline == at(DEFAULT_GRACE)


def test_a_victim_already_ended_gets_no_notice() -> None:
    req = request(2)
    saga, effects = open_saga(req, ended={req.victims[0].run_id: RunEnd.finished})
    assert names(effects, saga) == ["notice:1"]
    assert saga.victims[0].outcome is FIN and saga.victims[0].state is VictimState.done
    saga, effects = open_saga(req, ended={v.run_id: RunEnd.finished for v in req.victims})
    assert names(effects, saga) == ["completed"]


def test_a_preemptor_cancelled_before_the_plan_arrives_aborts_it_at_once() -> None:
    saga, effects = open_saga(cancelled=True)
    assert names(effects, saga) == ["completed:aborted"]
    assert saga.victims[0].outcome is AB


def test_a_run_listed_twice_is_one_victim() -> None:
    saga, effects = open_saga(request(duplicate=True))
    assert len(saga.victims) == 1 and names(effects, saga) == ["notice:0"]


def test_missing_victim_details_fall_back_to_valid_names() -> None:
    req = request()
    bare = req.model_copy(update={"victims": [req.victims[0].model_copy(
        update={"job_name": None, "user": None})]})
    saga, _ = open_saga(bare)
    assert saga.victims[0].job_name == f"job-{bare.victims[0].job_id[:8]}"
    assert saga.victims[0].user == "ml"


def test_notice_ids_are_distinct_per_victim() -> None:
    saga, _ = open_saga(request(3))
    assert len({v.notice_id for v in saga.victims}) == 3


# ---------------------------------------------------------------- messages


def test_completed_message_lists_every_victim() -> None:
    saga, _ = open_saga(request(2))
    apply(saga, Ack(0))
    apply(saga, Cancel(at=6))
    message = domain.completed_message(saga)
    assert message.aborted and message.plan_id == uid(1)
    assert [(v.outcome, v.checkpoint_uri) for v in message.victims] == [
        (A, "s3://ckpt/acked"), (AB, None)]


def test_a_share_victim_goes_through_the_normal_saga() -> None:
    """A GPU share stopped for a preemptor (DECISIONS 84, 85): `gpus` 0 and its fraction in
    `gpu_share`; notice, acknowledgement, stop and end as for any run, nothing counts GPUs."""
    req = request()
    half = req.victims[0].model_copy(update={"gpus": 0, "gpu_share": 0.5, "expected_lost_gpu_seconds": 0.0})
    saga, effects = open_saga(req.model_copy(update={"victims": [half]}))
    assert names(effects, saga) == ["notice:0"] and saga.victims[0].gpus == 0
    assert saga.victims[0].gpu_share == 0.5  # kept for the sagas listing (DECISIONS 86)
    assert names(apply(saga, Ack(0)), saga) == ["stop:0"]
    assert names(apply(saga, Ended(0, RunEnd.stopped, reason=StopReason.preempted, uri="s3://ckpt/acked")),
                 saga) == ["completed"]
    assert [(v.outcome, v.checkpoint_uri) for v in domain.completed_message(saga).victims] == [
        (A, "s3://ckpt/acked")]
