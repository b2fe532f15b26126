"""Drain rows (DECISIONS 100): what a node drain stops and what it leaves, one rule per row.

Each row is a world of runs, the drains, the clock, and the runs that must be stopped. The
admission side (a drained node takes no new placement) is a row of the policy's own table
(`test_policy_scenarios`, "a drained node takes no new placement")."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from rota_policy import POLICIES
from rota_policy.preemption.drain import Drain, drain_stops, expected_end, in_flight_nodes

from tests.unit.policy.builders import Run, World, cluster, gpu_jobs, team_config

NOW = 10_000.0
DEFAULT_RUNTIME_S = 4 * 3600.0


@dataclass(frozen=True)
class Row:
    name: str
    world: World
    drains: dict[str, Drain]
    stops: tuple[str, ...]
    """The run ids stopped, in order."""
    now: float = NOW
    scale: float = 1.0
    stopping: frozenset[str] = field(default_factory=frozenset)


def _ends(end: float) -> Run:
    return Run("nlp", "training", node=0, started=NOW - 100, end=end, run_id=f"ends-{end:.0f}")


ROWS = [
    Row("a run expected to end before the deadline is left to finish",
        cluster(2, _ends(NOW + 600)), {"n0": Drain("n0", NOW + 3600)}, stops=()),
    Row("a run expected to end after the deadline is stopped now",
        cluster(2, _ends(NOW + 7200)), {"n0": Drain("n0", NOW + 3600)}, stops=("ends-17200",)),
    Row("a run ending exactly at the deadline is left",
        cluster(2, _ends(NOW + 3600)), {"n0": Drain("n0", NOW + 3600)}, stops=()),
    Row("the runtime is scaled: twice as slow as declared no longer fits",
        cluster(2, _ends(NOW + 600)), {"n0": Drain("n0", NOW + 800)}, stops=("ends-10600",),
        scale=2.0),
    Row("a run that declared no runtime gets the default estimate",
        cluster(2, Run("nlp", node=0, started=NOW - 100, run_id="unknown")),
        {"n0": Drain("n0", NOW + 3600)}, stops=("unknown",)),
    Row("... and is left when the default estimate ends in time",
        cluster(2, Run("nlp", node=0, started=NOW - 100, run_id="unknown")),
        {"n0": Drain("n0", NOW + DEFAULT_RUNTIME_S)}, stops=()),
    Row("at the deadline whatever still runs is stopped, even a run expected to end soon",
        cluster(2, _ends(NOW + 60)), {"n0": Drain("n0", NOW)}, stops=("ends-10060",)),
    Row("a run on another node is untouched",
        cluster(2, Run("nlp", node=1, run_id="elsewhere", started=NOW - 100, end=NOW + 9e4)),
        {"n0": Drain("n0", NOW)}, stops=()),
    Row("a gang with one worker on the drained node stops whole, once",
        cluster(4, Run("nlp", node=[0, 1, 2, 3], run_id="gang", started=NOW - 100, end=NOW + 9e4)),
        {"n1": Drain("n1", NOW + 60), "n2": Drain("n2", NOW + 60)}, stops=("gang",)),
    Row("a run already being stopped is not stopped twice",
        cluster(2, _ends(NOW + 7200)), {"n0": Drain("n0", NOW)}, stops=(),
        stopping=frozenset({"ends-17200"})),
    Row("no drain, no stop", cluster(2, _ends(NOW + 7200)), {}, stops=()),
]  # fmt: skip


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_drain(row: Row) -> None:
    stops = drain_stops(row.world.runs, row.drains, row.now, runtime_scale=row.scale,
                        default_runtime_s=DEFAULT_RUNTIME_S, stopping=row.stopping)
    assert tuple(s.run.run_id for s in stops) == row.stops
    for stop in stops:
        assert stop.node in row.drains and row.drains[stop.node].reason in stop.why


def test_a_drained_node_takes_no_placement_and_its_drain_ends_when_empty() -> None:
    """The policy, given the scheduler's snapshot of a drained node (none of its GPUs free),
    places the job on the other node; the node counts as drained once no run is left."""
    world = cluster(2, drained=(0,))
    d = POLICIES["rota"](world.snapshot(gpu_jobs("nlp")), NOW, team_config({"nlp": 16}))
    assert [s.node for a in d.admissions for s in a.placement] == ["n1"]
    runs = cluster(2, _ends(NOW + 60)).runs
    assert in_flight_nodes({"n0": Drain("n0", NOW), "n1": Drain("n1", NOW)}, runs) == {
        "n0": 1, "n1": 0}


def test_expected_end_scales_only_a_declared_runtime() -> None:
    run = cluster(1, _ends(NOW + 100)).runs[0]
    assert expected_end(run, runtime_scale=3.0, default_runtime_s=1.0) == NOW - 100 + 600
    bare = cluster(1, Run("nlp", started=0.0)).runs[0]
    assert expected_end(bare, runtime_scale=3.0, default_runtime_s=50.0) == 50.0
