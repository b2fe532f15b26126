"""The ledger's rules for one proposal, as scenario tables over the builders' cluster."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from rota_ledger.domain import Code, Grant, Rejection, Snapshot, decide

from tests.unit.ledger.builders import On, cluster, request


@dataclass(frozen=True)
class Scenario:
    name: str
    on: On
    expect: Code | int
    """A rejection code, or the GPUs a grant borrows."""
    team: str = "nlp"
    flavor: str = "h100"
    gpus: int | None = None
    in_use: dict[str, int] = field(default_factory=dict)
    taken: dict[tuple[str, int], str] = field(default_factory=dict)
    held: dict[tuple[str, int], str] = field(default_factory=dict)
    run_seen: bool = False
    message_has: tuple[str, ...] = ()


SCENARIOS = [
    # placement: what the scheduler names must exist, in the right flavor, each GPU once
    Scenario("a whole node within quota", [("h-0", [0, 1, 2, 3])], 0),
    Scenario("a gang over two nodes", [("h-0", [0, 1]), ("h-1", [2, 3])], 0),
    Scenario("unknown node", [("h-9", [0])], Code.UNKNOWN_NODE, message_has=("h-9",)),
    Scenario("a100 node for an h100 proposal", [("a-0", [0])], Code.WRONG_FLAVOR, message_has=("a-0", "a100")),
    Scenario("GPU index past the node", [("h-0", [4])], Code.GPU_OUT_OF_RANGE, message_has=("0..3", "4")),
    Scenario("negative GPU index", [("h-0", [-1])], Code.GPU_OUT_OF_RANGE),
    Scenario("a GPU named twice", [("h-0", [1]), ("h-0", [1])], Code.INVALID_PLACEMENT, message_has=("h-0/1",)),
    Scenario("count disagrees with placement", [("h-0", [0, 1])], Code.INVALID_PLACEMENT, gpus=3, message_has=("2", "3")),
    Scenario("unconfigured flavor", [("h-0", [0])], Code.UNKNOWN_FLAVOR, flavor="tpu"),
    # the ledger's own rows
    Scenario("a GPU already allocated", [("h-0", [0, 1])], Code.GPU_TAKEN, taken={("h-0", 1): "run-x"}, message_has=("h-0/1", "run-x", "1 of 2")),
    Scenario("a GPU held for another plan", [("h-0", [0])], Code.HELD_FOR_PREEMPTOR, held={("h-0", 0): "plan-p"}, message_has=("plan-p",)),
    Scenario("taken wins over held", [("h-0", [0])], Code.GPU_TAKEN, taken={("h-0", 0): "r"}, held={("h-0", 0): "p"}),
    Scenario("the run was allocated before", [("h-0", [0])], Code.RUN_ALREADY_ALLOCATED, run_seen=True),
    # quota and borrowing: nlp has quota 8 and may borrow 4 more
    Scenario("up to quota borrows nothing", [("h-0", [0, 1, 2, 3])], 0, in_use={"nlp": 4}),
    Scenario("over quota borrows the excess", [("h-0", [0, 1, 2, 3])], 2, in_use={"nlp": 6}),
    Scenario("exactly quota + borrowing limit", [("h-0", [0, 1, 2, 3])], 4, in_use={"nlp": 8}),
    Scenario("one past the borrowing limit", [("h-0", [0, 1, 2, 3])], Code.OVER_BORROWING_LIMIT, in_use={"nlp": 9}, message_has=("13", "quota is 8", "at most 4")),
    Scenario("no borrowing limit: vision borrows freely", [("h-0", [0, 1, 2, 3])], 4, team="vision", in_use={"vision": 4}),
    Scenario("borrowing limit 0: research may not borrow", [("a-0", [0])], Code.OVER_BORROWING_LIMIT, team="research", flavor="a100"),
    Scenario("an unconfigured team only borrows", [("a-0", [0, 1])], 2, team="ghost", flavor="a100"),
    # lending: nlp keeps 4 of its 8 back from others while it does not use them
    Scenario("room left beside nlp's kept-back GPUs", [("h-3", [0, 1, 2, 3])], 4, team="vision", in_use={"vision": 8}),
    Scenario("into nlp's kept-back GPUs", [("h-3", [0])], Code.OVER_LENDING_LIMIT, team="vision", in_use={"vision": 12}, message_has=("keep 4", "13", "12")),
    Scenario("nlp uses its kept-back GPUs itself: nothing kept", [("h-3", [0])], 1, team="vision", in_use={"vision": 11, "nlp": 4}),
    Scenario("within vision's own quota, lending limits do not apply", [("h-3", [0])], 0, team="vision", in_use={"vision": 3, "nlp": 0}),
]


@pytest.mark.parametrize("s", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_decide(s: Scenario) -> None:
    snapshot = Snapshot(taken=s.taken, held=s.held, in_use=s.in_use, run_seen=s.run_seen)
    decision = decide(request(s.on, team=s.team, flavor=s.flavor, gpus=s.gpus), snapshot, cluster())
    if isinstance(s.expect, Code):
        assert isinstance(decision, Rejection), decision
        assert decision.code is s.expect
        for fragment in s.message_has:
            assert fragment in decision.message
    else:
        assert isinstance(decision, Grant), decision
        assert decision.borrowed_gpus == s.expect
        assert sum(seat.borrowed for seat in decision.seats) == s.expect
        assert [(x.node, x.gpu) for x in decision.seats] == [(n, g) for n, gpus in s.on for g in gpus]


def test_the_borrowed_gpus_are_the_tail_of_the_gang() -> None:
    on = [("h-0", [0, 1]), ("h-1", [0, 1])]
    decision = decide(request(on), Snapshot(in_use={"nlp": 7}), cluster())
    assert isinstance(decision, Grant)
    assert [(s.worker, s.borrowed) for s in decision.seats] == [(0, False), (0, True), (1, True), (1, True)]


def test_a_preemptor_may_take_gpus_its_own_plan_holds() -> None:
    # `held` lists only other plans' holds (the store filters the request's own plan out).
    decision = decide(request([("h-0", [0])], team="vision", plan_id="plan-p"), Snapshot(), cluster())
    assert isinstance(decision, Grant)


# name, GPU, quarters asked, team, quarters already on the GPU, taken whole, in use, expected
SHARE_SCENARIOS: list[tuple[str, int, int, str, int, bool, dict[str, float], Code | int]] = [
    ("a half on a free GPU", 0, 2, "vision", 0, False, {}, 1),
    ("a half beside a half", 0, 2, "vision", 2, False, {}, 1),
    ("three quarters beside a quarter", 0, 3, "vision", 1, False, {}, 1),
    ("a half beside three quarters", 0, 2, "vision", 3, False, {}, Code.GPU_SHARES_FULL),
    ("a quarter on a GPU held whole", 0, 1, "vision", 0, True, {}, Code.GPU_TAKEN),
    ("research may not borrow even a quarter", 0, 1, "research", 0, False, {}, Code.OVER_BORROWING_LIMIT),
]


@pytest.mark.parametrize("row", SHARE_SCENARIOS, ids=[r[0] for r in SHARE_SCENARIOS])
def test_decide_a_share(row: tuple[str, int, int, str, int, bool, dict[str, float], Code | int]) -> None:
    from rota_ledger.domain import Request

    _, gpu, quarters, team, on_gpu, whole, in_use, expect = row
    snapshot = Snapshot(taken={("a-0", gpu): "run-w"} if whole else {},
                        shared={("a-0", gpu): on_gpu} if on_gpu else {}, in_use=in_use)
    asked = Request(team=team, flavor="a100", gpus=1, workers=[(0, "a-0", [gpu])], share=quarters)
    decision = decide(asked, snapshot, cluster())
    if isinstance(expect, Code):
        assert isinstance(decision, Rejection) and decision.code is expect, decision
    else:
        assert isinstance(decision, Grant), decision
        assert [(s.node, s.gpu, s.share) for s in decision.seats] == [("a-0", gpu, quarters)]


def test_a_whole_gpu_never_meets_a_share_and_shares_need_a_shareable_flavor() -> None:
    from rota_ledger.domain import Request

    whole = decide(request([("a-0", [0, 1])], team="vision", flavor="a100"),
                   Snapshot(shared={("a-0", 1): 1}), cluster())
    assert isinstance(whole, Rejection) and whole.code is Code.GPU_TAKEN
    assert "never meets a share" in whole.message
    h100 = Request(team="nlp", flavor="h100", gpus=1, workers=[(0, "h-0", [0])], share=2)
    refused = decide(h100, Snapshot(), cluster())
    assert isinstance(refused, Rejection) and refused.code is Code.FLAVOR_NOT_SHAREABLE
    gang = Request(team="vision", flavor="a100", gpus=2, workers=[(0, "a-0", [0]), (1, "a-0", [1])], share=2)
    assert decide(gang, Snapshot(), cluster()) == Rejection(
        Code.INVALID_PLACEMENT, "a GPU share holds part of one GPU of one worker; the placement names 2")
