"""What a caller may keep between cycles: the layout, which depends on the nodes' shape only."""

from __future__ import annotations

from rota_policy.admission.placement import ClusterState
from rota_policy.model.layout import layout_of
from rota_policy.model.snapshot import NodeState


def _nodes(count: int, free: int = 8, rack: str = "r0") -> tuple[NodeState, ...]:
    return tuple(NodeState(f"n{i}", "gpu", rack, 8, tuple(range(free))) for i in range(count))


def test_a_gang_that_never_fits_one_layout_fits_a_larger_one() -> None:
    small = ClusterState(_nodes(1))
    assert not small.shape_fits("gpu", 2, 8, (None, None))
    # A layout kept from the smaller cluster is not used for the larger one.
    assert ClusterState(_nodes(2), small.layout).shape_fits("gpu", 2, 8, (None, None))
    assert not ClusterState(_nodes(1), small.layout).shape_fits("gpu", 2, 8, (None, None))


def test_a_kept_layout_carries_over_while_only_free_gpus_change() -> None:
    busy = ClusterState(_nodes(2, free=0))
    assert busy.shape_fits("gpu", 2, 8, ("rack", None))
    idle = ClusterState(_nodes(2, free=8), busy.layout)
    assert idle.layout is busy.layout
    assert idle.free_total == {"gpu": 16} and busy.free_total == {"gpu": 0}
    # Without one, each state builds its own: nothing is shared behind the caller's back.
    assert ClusterState(_nodes(2)).layout is not busy.layout
    # Another rack layout is another cluster: a kept layout of the old one is not used.
    split = (NodeState("n0", "gpu", "r0", 8, ()), NodeState("n1", "gpu", "r1", 8, ()))
    apart = ClusterState(split, busy.layout)
    assert apart.layout is not busy.layout
    assert not apart.shape_fits("gpu", 2, 8, ("rack", None))
    assert apart.shape_fits("gpu", 2, 8, (None, "rack"))


def test_layout_of_keeps_only_a_matching_layout() -> None:
    kept = layout_of(_nodes(2))
    assert layout_of(_nodes(2, free=3), kept) is kept
    assert layout_of(_nodes(3), kept) is not kept


def test_counts_follow_every_change_and_a_caller_may_change_its_copy() -> None:
    state = ClusterState(_nodes(3, free=8))
    state.take(0, 3)
    state.take_exact(1, (0, 5, 7))
    state.give(0, (1,))
    state.allocate([(2, 8)])
    assert state.counts() == [len(f) for f in state.free] == [6, 5, 0]
    mine = state.counts()
    mine[0] = 99
    assert state.counts() == [6, 5, 0]
