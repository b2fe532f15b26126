"""GPU shares in the ledger against real PostgreSQL (DECISIONS 66): shares on one GPU never
exceed 1, a whole-GPU grant never meets a share, and the database keeps both rules even when
the ledger's own check is blind (`gpu_claims`); a share stopped by a preemption gives back only
its own quarters (DECISIONS 84). A100s of the builders' cluster are shareable."""

from __future__ import annotations

from typing import Any

import pytest
from rota.clock import FakeClock
from rota.contracts import envelope
from rota.contracts import messages as m
from rota_ledger import book
from rota_ledger.book import Book
from rota_ledger.domain import Code, Grant, Rejection
from rota_ledger.ledger import Ledger
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.integration.ledger.conftest import queued, rows
from tests.integration.ledger.test_ledger_rules import ask, grant, reject
from tests.unit.ledger.builders import preemption_requested, proposal, run_ended


def share(gpu: int, fraction: float, clock: FakeClock, **kw: Any) -> Any:
    return proposal([("a-0", [gpu])], clock.now(), team="vision", user="carol", flavor="a100",
                    gpu_share=fraction, **kw)


async def claims(engine: AsyncEngine) -> list[tuple[str, int, str, int]]:
    return sorted((r.node, r.gpu, r.kind, r.used) for r in await rows(engine, "gpu_claims"))


async def test_two_halves_share_a_gpu_a_third_and_a_whole_gpu_are_refused(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock,
) -> None:
    first, second = share(0, 0.5, clock), share(0, 0.5, clock)
    await grant(ledger, first)
    await grant(ledger, second)
    assert await claims(ledger_engine) == [("a-0", 0, "shared", 4)]
    assert {r.share for r in await rows(ledger_engine, "allocations", node="a-0")} == {2}
    third = await reject(ledger, share(0, 0.5, clock))
    assert third.code is Code.GPU_SHARES_FULL and "has 1 of 1 held by GPU shares" in third.message
    whole = await reject(ledger, proposal([("a-0", [0, 1])], clock.now(), team="vision",
                                          user="carol", flavor="a100"))
    assert whole.code is Code.GPU_TAKEN and "a whole-GPU grant never meets a share" in whole.message
    (granted,) = await queued(ledger_engine, "AllocationGranted", proposal_id=first.data.proposal_id)
    assert granted["data"]["placement"] == [{"worker": 0, "node": "a-0", "gpus": [0], "gpu_share": 0.5}]
    assert granted["data"]["gpus"] == 1


async def test_a_share_never_lands_on_a_whole_gpu_and_quarters_fill_exactly_one(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock,
) -> None:
    await grant(ledger, proposal([("a-0", [1])], clock.now(), team="vision", user="carol", flavor="a100"))
    assert (await reject(ledger, share(1, 0.25, clock))).code is Code.GPU_TAKEN
    for fraction in (0.25, 0.75):
        await grant(ledger, share(2, fraction, clock))
    assert (await reject(ledger, share(2, 0.25, clock))).code is Code.GPU_SHARES_FULL
    assert await claims(ledger_engine) == [("a-0", 1, "whole", 4), ("a-0", 2, "shared", 4)]


async def test_releasing_a_share_lets_another_in_and_the_last_frees_the_gpu(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock,
) -> None:
    first, second = share(3, 0.5, clock), share(3, 0.5, clock)
    await grant(ledger, first)
    await grant(ledger, second)
    clock.advance(100)
    released = await ledger.run_ended(run_ended("RunFinished", first, clock.now()).to_bytes())
    assert released is not None and released.gpu_demand == 0.5
    (done,) = await queued(ledger_engine, "AllocationReleased", run_id=first.data.run_id)
    assert done["data"]["gpu_seconds"] == pytest.approx(50.0)  # half a GPU for 100 s
    assert await claims(ledger_engine) == [("a-0", 3, "shared", 2)]
    third = share(3, 0.5, clock)
    await grant(ledger, third)
    for env in (second, third):
        await ledger.run_ended(run_ended("RunFinished", env, clock.now()).to_bytes())
    assert await claims(ledger_engine) == []
    await grant(ledger, proposal([("a-0", [3])], clock.now(), team="vision", user="carol", flavor="a100"))


async def test_a_duplicate_share_proposal_is_decided_once(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock,
) -> None:
    env = share(0, 0.25, clock)
    await grant(ledger, env)
    assert await ledger.propose(env.to_bytes()) is None
    assert len(await rows(ledger_engine, "allocations", run_id=env.data.run_id)) == 1
    assert await claims(ledger_engine) == [("a-0", 0, "shared", 1)]


async def test_a_share_on_a_flavor_that_is_not_shareable_is_rejected_naming_the_rule(
    ledger: Ledger, clock: FakeClock,
) -> None:
    env = proposal([("h-0", [0])], clock.now(), gpu_share=0.5)
    rejection = await reject(ledger, env)
    assert rejection.code is Code.FLAVOR_NOT_SHAREABLE and "shareable: true" in rejection.message
    gang = proposal([("a-0", [0]), ("a-0", [1])], clock.now(), team="vision", user="carol",
                    flavor="a100", gpu_share=0.5)
    assert (await reject(ledger, gang)).code is Code.INVALID_PLACEMENT


@pytest.mark.parametrize("late", ["share", "whole"])
async def test_with_a_blind_check_the_database_alone_keeps_a_gpu_within_one(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock, monkeypatch: pytest.MonkeyPatch,
    late: str,
) -> None:
    for _ in range(2):
        await grant(ledger, share(1, 0.5, clock))

    async def blind(*args: Any, **kwargs: Any) -> Book:
        return Book()  # as if the check had run before the other grants committed

    monkeypatch.setattr(book, "read", blind)
    env = (share(1, 0.25, clock) if late == "share" else
           proposal([("a-0", [2, 1])], clock.now(), team="vision", user="carol", flavor="a100"))
    rejection = await reject(ledger, env)
    assert rejection.code is Code.GPU_TAKEN and "double booking" in rejection.message
    assert await rows(ledger_engine, "allocations", run_id=env.data.run_id) == []
    assert await claims(ledger_engine) == [("a-0", 1, "shared", 4)]  # GPU 2's claim undone


async def test_a_batch_of_shares_fills_one_gpu_and_refuses_the_rest(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock,
) -> None:
    envs = [share(0, 0.25, clock) for _ in range(6)]
    decisions = await ledger.propose_batch([e.to_bytes() for e in envs])
    assert [isinstance(d, Grant) for d in decisions] == [True] * 4 + [False] * 2
    assert {d.code for d in decisions if isinstance(d, Rejection)} == {Code.GPU_SHARES_FULL}
    assert await claims(ledger_engine) == [("a-0", 0, "shared", 4)]


async def test_quota_counts_a_share_as_its_fraction_and_the_read_api_shows_it(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock,
) -> None:
    # research may not borrow A100s and has no quota there: even a quarter is over its limit
    over = proposal([("a-0", [0])], clock.now(), team="research", user="dave", flavor="a100",
                    gpu_share=0.25)
    rejection = await reject(ledger, over)
    assert rejection.code is Code.OVER_BORROWING_LIMIT and "0.25 asked" in rejection.message
    env = share(0, 0.75, clock)
    await grant(ledger, env)
    reply = await ask(ledger_engine, envelope(m.ListAllocations(), source="test").to_bytes())
    (run,) = reply.result["allocations"]
    assert run["placement"] == [{"worker": 0, "node": "a-0", "gpus": [0], "gpu_share": 0.75}]
    assert run["gpus"] == 1


async def test_a_preempted_share_frees_only_its_quarters_for_its_preemptor(
    ledger: Ledger, ledger_engine: AsyncEngine, clock: FakeClock,
) -> None:
    """Two halves on one GPU; a plan stops one of them for a production half (DECISIONS 84):
    the other's claim stays, the preemptor's half is granted beside it, and a whole GPU is
    refused there until both are released."""
    victim, neighbour = share(2, 0.5, clock), share(2, 0.5, clock)
    await grant(ledger, victim)
    await grant(ledger, neighbour)
    requested = preemption_requested([victim], clock.now(), target=[("a-0", [2])], target_share=0.5)
    assert requested.data.victims[0].gpu_share == 0.5 and requested.data.victims[0].gpus == 1
    assert await ledger.preemption(requested.to_bytes()) == 1  # its GPU, held for the preemptor
    clock.advance(60)
    await ledger.run_ended(run_ended("RunStopped", victim, clock.now()).to_bytes())
    assert await claims(ledger_engine) == [("a-0", 2, "shared", 2)]  # the neighbour's half stays
    # Held: another job's half may not take the room the victim left.
    assert (await reject(ledger, share(2, 0.5, clock))).code is Code.HELD_FOR_PREEMPTOR
    assert [r.run_id for r in await rows(ledger_engine, "allocations", node="a-0") if r.released_at is None] \
        == [neighbour.data.run_id]
    preemptor = share(2, 0.5, clock, plan_id=requested.data.plan_id, job_id=requested.data.preemptor_job_id)
    await grant(ledger, preemptor)
    assert await claims(ledger_engine) == [("a-0", 2, "shared", 4)]
    whole = proposal([("a-0", [2])], clock.now(), team="vision", user="carol", flavor="a100")
    assert (await reject(ledger, whole)).code is Code.GPU_TAKEN
    await ledger.run_ended(run_ended("RunFinished", neighbour, clock.now()).to_bytes())
    assert (await reject(ledger, proposal([("a-0", [2])], clock.now(), team="vision", user="carol",
                                          flavor="a100"))).code is Code.GPU_TAKEN  # one half is left
    await ledger.run_ended(run_ended("RunFinished", preemptor, clock.now()).to_bytes())
    assert await claims(ledger_engine) == []
    await grant(ledger, proposal([("a-0", [2])], clock.now(), team="vision", user="carol", flavor="a100"))
