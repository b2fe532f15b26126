"""Topology levels: which domain of which level a gang must, or would like to, share.

A cluster declares its levels outermost first (`block > rack`); the node is the implicit,
innermost level. A node carries a value per level (`NodeState.levels`); a cluster that declares
none has the one level `rack`, from `NodeState.rack`, exactly as before levels existed.

A job's need is a pair (required, preferred) of level names (`PendingJob.need`). The layout
turns it into a chain of levels to try, innermost first (`Layout.chain`): the preferred level,
then each level outward of it, up to the required one, which is a hard stop; with no required
level, the whole cluster comes last (Kueue TAS's `preferred-topology`, relaxed outward; Slurm's
topology/block; DECISIONS 61).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from rota.contracts.job import RackAffinity

__all__ = ["NODE", "RACK", "Chain", "Need", "TopologyNeed", "job_topology", "need_of"]

RACK = "rack"
NODE = "node"
"""The implicit innermost level: every node is its own domain."""

Need = tuple[str | None, str | None]
"""(required level, preferred level); (None, None): no topology asked."""

Chain = tuple[tuple[str, ...], bool]
"""The levels to try, innermost first, and whether the last is required (no cluster-wide try)."""

_RACK_NEED: Mapping[RackAffinity, Need] = MappingProxyType({
    RackAffinity.none: (None, None),
    RackAffinity.preferred: (None, RACK),
    RackAffinity.required: (RACK, None),
})


@dataclass(frozen=True, slots=True)
class TopologyNeed:
    """A job's topology request: the level all its workers must share, and the one they would
    best share. Either may be None, not both."""

    required: str | None = None
    preferred: str | None = None


def need_of(rack: RackAffinity, topology: TopologyNeed | None) -> Need:
    """A job's need: its topology request if it has one, else its rack affinity as the level
    `rack` (which decides exactly as rack affinity did before levels)."""
    if topology is None:
        return _RACK_NEED[rack]
    return (topology.required, topology.preferred)


def job_topology(
    requested: TopologyNeed | None, rack: RackAffinity, workers: int, gangs: TopologyNeed | None
) -> TopologyNeed | None:
    """A job's topology: what it asked for; else, for a gang of several workers that asked for
    neither topology nor rack affinity, the cluster's default for gangs
    (`cluster.topology.gangs`, DECISIONS 63); else None."""
    if requested is not None:
        return requested
    if gangs is not None and workers > 1 and rack is RackAffinity.none:
        return gangs
    return None
