"""The ledger deciding a pull batch in one transaction: in order, each proposal seeing the
grants before it, once per proposal, an unreadable message skipped without failing the rest."""

from __future__ import annotations

from rota.clock import FakeClock
from rota_ledger.domain import Code, Grant, Rejection
from rota_ledger.ledger import Ledger
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.ledger.conftest import queued, rows
from tests.unit.ledger.builders import preemption_requested, proposal, run_ended


async def test_a_batch_decides_in_order_each_proposal_seeing_the_grants_before_it(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock,
) -> None:
    first = proposal([("h-0", [0, 1])], clock.now())
    clash = proposal([("h-0", [1, 2])], clock.now(), team="vision", user="carol")
    after = proposal([("h-0", [2, 3])], clock.now())
    decisions = await ledger.propose_batch(
        [first.to_bytes(), clash.to_bytes(), b"not json", first.to_bytes(), after.to_bytes()])
    assert isinstance(decisions[0], Grant) and isinstance(decisions[4], Grant)
    assert isinstance(decisions[1], Rejection) and decisions[1].code is Code.GPU_TAKEN
    assert f"h-0/1 (run {first.data.run_id})" in decisions[1].message
    assert decisions[2] is None and decisions[3] is None  # unreadable; a copy of the first
    assert len(await queued(ledger_engine, "AllocationGranted", proposal_id=first.data.proposal_id)) == 1
    assert len(await queued(ledger_engine, "AllocationRejected", proposal_id=clash.data.proposal_id)) == 1
    assert sorted(r.gpu for r in await rows(ledger_engine, "allocations", node="h-0")) == [0, 1, 2, 3]
    assert len(await rows(ledger_engine, "entries", kind="grant")) == 2
    # the whole batch redelivered changes nothing
    again = await ledger.propose_batch([first.to_bytes(), clash.to_bytes(), after.to_bytes()])
    assert again == [None, None, None]
    assert len(await rows(ledger_engine, "allocations", node="h-0")) == 4


async def test_a_batch_counts_its_own_grants_against_the_limits(ledger: Ledger, clock: FakeClock) -> None:
    # nlp: quota 8, may borrow 4 more; the third proposal would make 13
    batch = [proposal([(f"h-{i}", [0, 1, 2, 3])], clock.now()) for i in range(3)]
    batch.append(proposal([("h-3", [0])], clock.now()))
    decisions = await ledger.propose_batch([env.to_bytes() for env in batch])
    assert [type(d) for d in decisions] == [Grant, Grant, Grant, Rejection]
    assert isinstance(decisions[2], Grant) and decisions[2].borrowed_gpus == 4
    assert isinstance(decisions[3], Rejection) and decisions[3].code is Code.OVER_BORROWING_LIMIT


async def test_a_grant_in_a_batch_frees_its_holds_for_the_proposals_after_it(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock,
) -> None:
    victim = proposal([("h-1", [0, 1])], clock.now(), queue="experiment")
    assert isinstance(await ledger.propose(victim.to_bytes()), Grant)
    requested = preemption_requested([victim], clock.now())
    assert await ledger.preemption(requested.to_bytes()) == 2
    await ledger.run_ended(run_ended("RunStopped", victim, clock.now()).to_bytes())
    before = proposal([("h-1", [1])], clock.now(), team="vision", user="carol")
    preemptor = proposal([("h-1", [0])], clock.now(), team="vision", user="carol",
                         plan_id=requested.data.plan_id, job_id=requested.data.preemptor_job_id)
    later = proposal([("h-1", [1])], clock.now(), team="vision", user="carol")
    decisions = await ledger.propose_batch([e.to_bytes() for e in (before, preemptor, later)])
    assert isinstance(decisions[0], Rejection) and decisions[0].code is Code.HELD_FOR_PREEMPTOR
    assert isinstance(decisions[1], Grant) and isinstance(decisions[2], Grant)
    assert await rows(ledger_engine, "holds") == []
