"""Which runs a node drain stops, and when (DECISIONS 100). Pure: runs and drains in, stops out.

A drained node takes no new placement: the caller's snapshot offers none of its GPUs, as for
a node withdrawn. This decides what happens to the runs already there. A run expected to end
before the drain's deadline, by its runtime scaled as the ETAs scale it (`Snapshot.runtime_scale`),
is left to finish; any other is stopped now, through the usual notice and checkpoint
acknowledgement, as a preemption with the reason `drain`. Once the deadline has passed, every
run still there is stopped the same way. A gang with one worker on the node stops whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rota_policy.model.snapshot import RunningRun

DRAIN_REASON = "drain"


@dataclass(frozen=True, slots=True)
class Drain:
    node: str
    deadline: float
    reason: str = "maintenance"


@dataclass(frozen=True, slots=True)
class DrainStop:
    """Stop `run` for the drain of `node`: `why` says so in the user's terms."""

    run: RunningRun
    node: str
    why: str


def expected_end(run: RunningRun, *, runtime_scale: float, default_runtime_s: float) -> float:
    """When `run` is expected to end: its declared runtime times the scale finished jobs ran
    at, from its start; the default runtime estimate when it declared none."""
    if run.expected_end is None:
        return run.started_at + default_runtime_s
    return run.started_at + (run.expected_end - run.started_at) * runtime_scale


def drain_stops(
    runs: Iterable[RunningRun],
    drains: Mapping[str, Drain],
    now: float,
    *,
    runtime_scale: float = 1.0,
    default_runtime_s: float,
    stopping: frozenset[str] = frozenset(),
) -> list[DrainStop]:
    """The runs on drained nodes to stop this cycle, each once, in the order of `runs`.

    `stopping`: runs already told to stop (a drain's plan in flight, or another preemption),
    which are not stopped twice."""
    if not drains:
        return []
    out: list[DrainStop] = []
    for run in runs:
        if run.run_id in stopping:
            continue
        node = next((s.node for s in run.placement if s.node in drains), None)
        if node is None:
            continue
        drain = drains[node]
        end = expected_end(run, runtime_scale=runtime_scale, default_runtime_s=default_runtime_s)
        if now < drain.deadline and end <= drain.deadline:
            continue  # expected to finish in time: left to finish
        why = (f"node {node} is drained ({drain.reason}): the deadline has passed"
               if now >= drain.deadline else
               f"node {node} is drained ({drain.reason}) and this run is not expected to end"
               " before the drain's deadline")
        out.append(DrainStop(run, node, why))
    return out


def eviction_stops(
    runs: Iterable[RunningRun],
    evictions: Mapping[str, tuple[str, str]],
    *,
    stopping: frozenset[str] = frozenset(),
) -> list[DrainStop]:
    """Runs one of whose pods an eviction was requested for (run id -> (node, why)): each is
    stopped now, as a drain at its deadline would stop it, once."""
    return [DrainStop(run, *evictions[run.run_id]) for run in runs
            if run.run_id in evictions and run.run_id not in stopping]


def in_flight_nodes(drains: Mapping[str, Drain], runs: Iterable[RunningRun]) -> dict[str, int]:
    """Per drained node, the runs still on it: a node with none is drained, else draining."""
    on: dict[str, int] = dict.fromkeys(drains, 0)
    for run in runs:
        for node in {s.node for s in run.placement if s.node in on}:
            on[node] += 1
    return on
