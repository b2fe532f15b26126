"""What a cluster state keeps between cycles: what depends on its layout only."""

from __future__ import annotations

from rota.contracts.job import RackAffinity
from rota_policy.model import NodeState
from rota_policy.placement import ClusterState


def _nodes(count: int, free: int = 8, rack: str = "r0") -> tuple[NodeState, ...]:
    return tuple(NodeState(f"n{i}", "gpu", rack, 8, tuple(range(free))) for i in range(count))


def test_a_gang_that_never_fits_one_layout_fits_a_larger_one() -> None:
    assert not ClusterState(_nodes(1)).shape_fits("gpu", 2, 8, RackAffinity.none)
    assert ClusterState(_nodes(2)).shape_fits("gpu", 2, 8, RackAffinity.none)
    assert not ClusterState(_nodes(1)).shape_fits("gpu", 2, 8, RackAffinity.none)


def test_answers_carry_over_while_only_free_gpus_change() -> None:
    busy, idle = ClusterState(_nodes(2, free=0)), ClusterState(_nodes(2, free=8))
    assert busy.shape_fits("gpu", 2, 8, RackAffinity.required)
    assert idle.fit_ever is busy.fit_ever
    assert idle.free_total == {"gpu": 16} and busy.free_total == {"gpu": 0}
    # Another rack layout is another cluster: its answers start afresh.
    split = (NodeState("n0", "gpu", "r0", 8, ()), NodeState("n1", "gpu", "r1", 8, ()))
    apart = ClusterState(split)
    assert apart.fit_ever is not busy.fit_ever
    assert not apart.shape_fits("gpu", 2, 8, RackAffinity.required)
    assert apart.shape_fits("gpu", 2, 8, RackAffinity.preferred)
