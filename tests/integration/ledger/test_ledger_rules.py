"""The ledger's transactions against real PostgreSQL, driven in-process on a `FakeClock`:
grants, rejections, holds, releases, usage and the read API. What it would publish is read
back from its outbox, so nothing here touches the shared streams."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import sqlalchemy as sa
from rota.clock import FakeClock
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.ids import new_id
from rota_ledger import book, store
from rota_ledger.api import answer
from rota_ledger.book import Book
from rota_ledger.domain import Code, Grant, Rejection
from rota_ledger.ledger import Ledger
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.ledger.conftest import MAX_BYTES, queued, rows
from tests.unit.ledger.builders import (
    HALF_LIFE_S,
    preemption_completed,
    preemption_requested,
    proposal,
    run_ended,
)


async def grant(ledger: Ledger, env: Any) -> Grant:
    decision = await ledger.propose(env.to_bytes())
    assert isinstance(decision, Grant), decision
    return decision


async def reject(ledger: Ledger, env: Any) -> Rejection:
    decision = await ledger.propose(env.to_bytes())
    assert isinstance(decision, Rejection), decision
    return decision


async def test_a_grant_writes_one_row_per_gpu_an_entry_and_allocation_granted(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock,
) -> None:
    env = proposal([("h-0", [0, 1]), ("h-1", [3])], clock.now(), user="bob")
    await grant(ledger, env)
    p = env.data
    allocated = await rows(ledger_engine, "allocations", run_id=p.run_id)
    assert sorted((r.worker, r.node, r.gpu) for r in allocated) == [(0, "h-0", 0), (0, "h-0", 1), (1, "h-1", 3)]
    assert {(r.team, r.user_name, r.flavor, r.proposal_id, r.granted_at) for r in allocated} == {
        ("nlp", "bob", "h100", p.proposal_id, clock.now())}
    assert [(e.kind, e.gpus) for e in await rows(ledger_engine, "entries", run_id=p.run_id)] == [("grant", 3)]
    (granted,) = await queued(ledger_engine, "AllocationGranted", proposal_id=p.proposal_id)
    assert granted["run_id"] == p.run_id and granted["job_id"] == p.job_id
    assert granted["data"]["gpus"] == 3 and granted["data"]["borrowed_gpus"] == 0
    assert granted["data"]["placement"] == [w.model_dump() for w in p.placement]


async def test_a_gpu_is_never_granted_twice(ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock) -> None:
    first = proposal([("h-0", [0, 1])], clock.now())
    await grant(ledger, first)
    second = proposal([("h-0", [1, 2])], clock.now(), team="vision", user="carol")
    rejection = await reject(ledger, second)
    assert rejection.code is Code.GPU_TAKEN
    assert f"h-0/1 (run {first.data.run_id})" in rejection.message
    (rejected,) = await queued(ledger_engine, "AllocationRejected", proposal_id=second.data.proposal_id)
    assert rejected["data"]["code"] == "GPU_TAKEN"
    assert await rows(ledger_engine, "allocations", run_id=second.data.run_id) == []


async def test_racing_proposals_for_one_gpu_grant_exactly_one(ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock) -> None:
    racers = [proposal([("h-2", [0, 1])], clock.now()) for _ in range(8)]
    decisions = await asyncio.gather(*(ledger.propose(env.to_bytes()) for env in racers))
    assert sum(isinstance(d, Grant) for d in decisions) == 1
    assert {d.code for d in decisions if isinstance(d, Rejection)} == {Code.GPU_TAKEN}
    assert len(await rows(ledger_engine, "allocations", node="h-2")) == 2


async def test_a_stale_check_meets_the_unique_index_and_is_rejected_leaving_nothing(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = proposal([("h-3", [2])], clock.now())
    await grant(ledger, first)

    async def blind(*args: Any, **kwargs: Any) -> Book:
        return Book()  # as if the check had run before the other grant committed

    monkeypatch.setattr(book, "read", blind)
    late = proposal([("h-3", [3, 2])], clock.now())  # the free GPU first: it must not stay
    rejection = await reject(ledger, late)
    assert rejection.code is Code.GPU_TAKEN and "double booking" in rejection.message
    assert len(await queued(ledger_engine, "AllocationRejected", proposal_id=late.data.proposal_id)) == 1
    assert await rows(ledger_engine, "allocations", run_id=late.data.run_id) == []
    assert await rows(ledger_engine, "entries", run_id=late.data.run_id) == []


async def test_without_the_flavor_lock_the_unique_index_alone_grants_one_racer(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Concurrent transactions that all see the GPUs free: the index lets one through."""
    async def no_lock(*args: Any) -> None:
        return None

    monkeypatch.setattr(store, "lock_flavor", no_lock)
    racers = [proposal([("h-2", [2, 3])] if i % 2 else [("h-2", [3, 2])], clock.now()) for i in range(8)]
    decisions = await asyncio.gather(*(ledger.propose(env.to_bytes()) for env in racers))
    assert sum(isinstance(d, Grant) for d in decisions) == 1
    assert {d.code for d in decisions if isinstance(d, Rejection)} == {Code.GPU_TAKEN}
    assert len(await rows(ledger_engine, "allocations", node="h-2")) == 2


async def test_the_database_refuses_a_double_booking_on_its_own(ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock) -> None:
    await grant(ledger, proposal([("h-1", [0])], clock.now()))
    with pytest.raises(IntegrityError, match="allocations_one_active_per_gpu"):
        async with ledger_engine.begin() as conn:
            await conn.execute(sa.text(
                "INSERT INTO ledger.allocations (node, gpu, worker, run_id, job_id, proposal_id,"
                " team, user_name, queue, flavor, borrowed, granted_at)"
                " VALUES ('h-1', 0, 0, 'r', 'j', 'p', 'nlp', 'alice', 'training', 'h100', false, now())"))


async def test_a_redelivered_proposal_is_decided_once(ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock) -> None:
    env = proposal([("h-0", [3])], clock.now())
    await grant(ledger, env)
    assert await ledger.propose(env.to_bytes()) is None
    # the same proposal re-published under a new envelope id is the same proposal
    again = envelope(env.data, source="scheduler", job_id=env.job_id, run_id=env.run_id)
    assert await ledger.propose(again.to_bytes()) is None
    assert len(await queued(ledger_engine, "AllocationGranted", proposal_id=env.data.proposal_id)) == 1
    assert len(await rows(ledger_engine, "allocations", run_id=env.data.run_id)) == 1


async def test_a_run_is_allocated_once_even_under_a_new_proposal(ledger: Ledger, clock: FakeClock) -> None:
    env = proposal([("h-0", [0])], clock.now())
    await grant(ledger, env)
    other = proposal([("h-1", [0])], clock.now(), run_id=env.data.run_id, job_id=env.data.job_id)
    assert (await reject(ledger, other)).code is Code.RUN_ALREADY_ALLOCATED


async def test_quota_and_borrowing_are_checked_against_the_ledgers_own_rows(ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock) -> None:
    # nlp: quota 8 + borrowing limit 4 = 12; vision may borrow without limit
    await grant(ledger, proposal([("h-0", [0, 1, 2, 3]), ("h-1", [0, 1, 2, 3])], clock.now()))
    borrowing = proposal([("h-2", [0, 1, 2])], clock.now())
    assert (await grant(ledger, borrowing)).borrowed_gpus == 3
    (granted,) = await queued(ledger_engine, "AllocationGranted", proposal_id=borrowing.data.proposal_id)
    assert granted["data"]["borrowed_gpus"] == 3
    assert sum(r.borrowed for r in await rows(ledger_engine, "allocations", run_id=borrowing.data.run_id)) == 3
    over = proposal([("h-2", [3]), ("h-3", [0])], clock.now())
    rejection = await reject(ledger, over)
    assert rejection.code is Code.OVER_BORROWING_LIMIT
    assert "13" in rejection.message and "quota is 8" in rejection.message
    (rejected,) = await queued(ledger_engine, "AllocationRejected", proposal_id=over.data.proposal_id)
    assert rejected["data"]["message"] == rejection.message


async def test_lending_limits_keep_the_owners_gpus_back(ledger: Ledger, clock: FakeClock) -> None:
    # nlp lends at most 4 of its 8: while it is idle, others may hold at most 16 - 4 = 12
    await grant(ledger, proposal([("h-0", [0, 1, 2, 3]), ("h-1", [0, 1, 2, 3]), ("h-2", [0, 1, 2, 3])],
                                 clock.now(), team="vision", user="carol"))
    rejection = await reject(ledger, proposal([("h-3", [0])], clock.now(), team="vision", user="carol"))
    assert rejection.code is Code.OVER_LENDING_LIMIT
    await grant(ledger, proposal([("h-3", [0, 1, 2, 3])], clock.now()))  # nlp itself may


@pytest.mark.parametrize(("on", "flavor", "code"), [
    ([("h-7", [0])], "h100", Code.UNKNOWN_NODE),
    ([("a-0", [0])], "h100", Code.WRONG_FLAVOR),
    ([("h-0", [4])], "h100", Code.GPU_OUT_OF_RANGE),
    ([("h-0", [0]), ("h-0", [0])], "h100", Code.INVALID_PLACEMENT),
    ([("h-0", [0])], "tpu", Code.UNKNOWN_FLAVOR),
])
async def test_a_placement_the_cluster_cannot_hold_is_rejected(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock, on: Any, flavor: str, code: Code,
) -> None:
    env = proposal(on, clock.now(), flavor=flavor)
    assert (await reject(ledger, env)).code is code
    assert await rows(ledger_engine, "allocations") == []


async def test_a_release_frees_the_gpus_books_the_entry_and_the_decayed_usage(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock,
) -> None:
    env = proposal([("h-0", [0, 1])], clock.now(), user="bob")
    await grant(ledger, env)
    clock.advance(HALF_LIFE_S)
    released = await ledger.run_ended(run_ended("RunFinished", env, clock.now()).to_bytes())
    assert released is not None and released.gpus == 2
    assert all(r.released_at == clock.now() and r.release_reason == "finished"
               for r in await rows(ledger_engine, "allocations", run_id=env.data.run_id))
    (done,) = await queued(ledger_engine, "AllocationReleased", run_id=env.data.run_id)
    assert done["data"]["gpus"] == 2 and done["data"]["gpu_seconds"] == pytest.approx(2 * HALF_LIFE_S)
    (usage,) = await queued(ledger_engine, "UsageRecorded")
    integral = 2 * HALF_LIFE_S / (2 * 0.6931471805599453)  # one half-life of 2 GPUs, decayed
    assert usage["data"]["teams"] == {"nlp": pytest.approx(integral)}
    assert usage["data"]["users"] == {"nlp/bob": pytest.approx(integral)}
    assert usage["data"]["half_life_s"] == HALF_LIFE_S
    # the GPUs are free again
    await grant(ledger, proposal([("h-0", [0, 1])], clock.now(), team="vision", user="carol"))


async def test_usage_decays_between_releases_and_covers_every_team(ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock) -> None:
    a = proposal([("h-0", [0])], clock.now(), user="alice")
    b = proposal([("h-1", [0])], clock.now(), team="vision", user="carol")
    await grant(ledger, a)
    await grant(ledger, b)
    clock.advance(60)
    await ledger.run_ended(run_ended("RunFinished", a, clock.now()).to_bytes())
    clock.advance(2 * HALF_LIFE_S)
    await ledger.run_ended(run_ended("RunFailed", b, clock.now()).to_bytes())
    last = (await queued(ledger_engine, "UsageRecorded"))[-1]["data"]
    nlp_after = 60 * 0.25  # ~60 GPU-seconds, two half-lives ago
    assert last["teams"]["nlp"] == pytest.approx(nlp_after, rel=0.01)
    assert set(last["teams"]) == {"nlp", "vision"}
    assert set(last["users"]) == {"vision/carol"}  # users of the released run's team only


@pytest.mark.parametrize("first", ["RunFinished", "RunFailed", "RunStopped"])
async def test_releasing_twice_or_an_unknown_run_changes_nothing(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock, first: str,
) -> None:
    env = proposal([("h-0", [0])], clock.now())
    await grant(ledger, env)
    clock.advance(10)
    end = run_ended(first, env, clock.now())
    assert await ledger.run_ended(end.to_bytes()) is not None
    clock.advance(10)
    assert await ledger.run_ended(end.to_bytes()) is None  # redelivered
    assert await ledger.run_ended(run_ended("RunFinished", env, clock.now()).to_bytes()) is None
    stranger = proposal([("h-1", [0])], clock.now())  # never proposed to the ledger
    assert await ledger.run_ended(run_ended("RunFinished", stranger, clock.now()).to_bytes()) is None
    assert len(await queued(ledger_engine, "AllocationReleased")) == 1
    assert len(await queued(ledger_engine, "UsageRecorded")) == 1
    assert [e.kind for e in await rows(ledger_engine, "entries")] == ["grant", "release"]


async def test_a_run_that_is_only_started_or_checkpointed_keeps_its_gpus(ledger: Ledger, clock: FakeClock) -> None:
    env = proposal([("h-0", [0])], clock.now())
    await grant(ledger, env)
    started = envelope(m.RunStarted(run_id=env.data.run_id, job_id=env.data.job_id, attempt=1,
                                    placement=env.data.placement), source="executor")
    assert await ledger.run_ended(started.to_bytes()) is None
    assert (await reject(ledger, proposal([("h-0", [0])], clock.now()))).code is Code.GPU_TAKEN


async def test_the_books_balance_to_zero_and_stay_append_only(ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock) -> None:
    runs = [proposal([("h-0", [i])], clock.now()) for i in range(4)]
    for env in runs:
        await grant(ledger, env)
    clock.advance(30)
    for env in runs:
        await ledger.run_ended(run_ended("RunFinished", env, clock.now()).to_bytes())
    async with ledger_engine.connect() as conn:
        assert (await conn.execute(sa.text("SELECT sum(gpus) FROM ledger.entries"))).scalar() == 0
        assert (await conn.execute(sa.text(
            "SELECT count(*) FROM ledger.allocations WHERE released_at IS NULL"))).scalar() == 0
    with pytest.raises(DBAPIError, match="append-only"):
        async with ledger_engine.begin() as conn:
            await conn.execute(sa.text("UPDATE ledger.entries SET gpus = 0"))


# ------------------------------------------------------------------ holds


async def _preempt(ledger: Ledger, clock: FakeClock) -> tuple[Any, Any]:
    """An experiment victim on h-1/0-1 is preempted: the request holds its GPUs, it stops."""
    victim = proposal([("h-1", [0, 1])], clock.now(), team="nlp", queue="experiment")
    await grant(ledger, victim)
    requested = preemption_requested([victim], clock.now())
    assert await ledger.preemption(requested.to_bytes()) == 2
    clock.advance(30)
    await ledger.run_ended(run_ended("RunStopped", victim, clock.now()).to_bytes())
    return victim, requested


async def test_held_gpus_go_to_the_plans_preemptor_only(ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock) -> None:
    _, requested = await _preempt(ledger, clock)
    plan = requested.data.plan_id
    rejection = await reject(ledger, proposal([("h-1", [1, 2])], clock.now(), team="vision", user="carol"))
    assert rejection.code is Code.HELD_FOR_PREEMPTOR and plan in rejection.message
    preemptor = proposal([("h-1", [0, 1])], clock.now(), team="vision", user="carol",
                         queue="production", plan_id=plan, job_id=requested.data.preemptor_job_id)
    await grant(ledger, preemptor)
    assert await rows(ledger_engine, "holds") == []  # cleared by the grant
    # a redelivered request cannot bring the holds back
    assert await ledger.preemption(requested.to_bytes()) == 0
    await ledger.run_ended(run_ended("RunFinished", preemptor, clock.now()).to_bytes())
    await grant(ledger, proposal([("h-1", [0, 1])], clock.now()))


async def test_the_preemptor_gets_its_held_gpus_even_without_the_plan_id(ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock) -> None:
    """A scheduler that forgot the plan (say, after its first proposal was rejected) must not
    be locked out of the GPUs held for that very job for an hour."""
    _, requested = await _preempt(ledger, clock)
    job = requested.data.preemptor_job_id
    assert (await reject(ledger, proposal([("h-1", [0])], clock.now(), team="vision"))).code is Code.HELD_FOR_PREEMPTOR
    await grant(ledger, proposal([("h-1", [0, 1])], clock.now(), team="vision", job_id=job))
    assert await rows(ledger_engine, "holds") == []


async def test_an_aborted_plan_frees_its_holds(ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock) -> None:
    _, requested = await _preempt(ledger, clock)
    assert await ledger.preemption(preemption_completed(requested, clock.now(), aborted=False).to_bytes()) == 0
    assert len(await rows(ledger_engine, "holds")) == 2  # a completed plan still waits for its preemptor
    assert await ledger.preemption(preemption_completed(requested, clock.now(), aborted=True).to_bytes()) == 2
    await grant(ledger, proposal([("h-1", [0, 1])], clock.now(), team="vision", user="carol"))


async def test_holds_expire_after_an_hour(ledger: Ledger, clock: FakeClock) -> None:
    await _preempt(ledger, clock)
    clock.advance(3600)
    await grant(ledger, proposal([("h-1", [0])], clock.now(), team="vision", user="carol"))


async def test_a_plans_target_is_held_too(ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock) -> None:
    victim = proposal([("h-2", [0])], clock.now(), queue="experiment")
    await grant(ledger, victim)
    requested = preemption_requested([victim], clock.now(), target=[("h-2", [0, 1])])
    assert await ledger.preemption(requested.to_bytes()) == 2
    held = {(r.node, r.gpu, r.victim_run_id) for r in await rows(ledger_engine, "holds")}
    assert held == {("h-2", 0, victim.data.run_id), ("h-2", 1, None)}


# ------------------------------------------------------------------ the read API


async def ask(engine: AsyncEngine, raw: bytes) -> m.ApiReply:
    reply = json.loads(await answer(engine, raw, max_bytes=MAX_BYTES))
    assert reply["type"] == "ApiReply"
    return m.ApiReply.model_validate(reply["data"])


async def test_the_read_api_lists_allocations_per_run(ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock) -> None:
    gang = proposal([("h-0", [0, 1]), ("h-1", [2])], clock.now(), user="bob")
    other = proposal([("h-2", [0])], clock.now())
    for env in (gang, other):
        await grant(ledger, env)
    clock.advance(5)
    await ledger.run_ended(run_ended("RunFinished", other, clock.now()).to_bytes())

    reply = await ask(ledger_engine, envelope(m.ListAllocations(), source="test").to_bytes())
    assert reply.ok and reply.result["truncated"] is False
    (run,) = reply.result["allocations"]
    assert run["run_id"] == gang.data.run_id and run["user"] == "bob" and run["gpus"] == 3
    assert run["placement"] == [w.model_dump() for w in gang.data.placement]
    assert run["released_at"] is None

    everything = await ask(ledger_engine, envelope(m.ListAllocations(active_only=False, limit=1), source="test").to_bytes())
    assert [r["run_id"] for r in everything.result["allocations"]] == [other.data.run_id]  # newest first
    assert everything.result["truncated"] is True
    mine = await ask(ledger_engine, envelope(m.ListAllocations(active_only=False, job_id=other.data.job_id), source="test").to_bytes())
    assert [r["release_reason"] for r in mine.result["allocations"]] == ["finished"]


async def test_the_read_api_answers_a_bad_request_with_an_error(ledger_engine: AsyncEngine, ledger: Ledger) -> None:
    body = {"id": new_id(), "type": "ListAllocations", "version": 1, "occurred_at": "2026-01-01T00:00:00Z",
            "source": "test", "data": {"active_only": True, "colour": "blue"}}
    reply = await ask(ledger_engine, json.dumps(body).encode())
    assert not reply.ok and reply.error is not None
    assert (reply.error.code, reply.error.field) == ("INVALID_FIELD", "data.colour")
    assert not (await ask(ledger_engine, b"not json")).ok

