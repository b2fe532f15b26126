"""Plans in flight in one cycle: the preemptors (and restarting jobs) whose GPUs are held for
them, what each holds, and when its victims are expected to have stopped."""

from __future__ import annotations

from dataclasses import dataclass, field

from rota_policy.admission.placement import ClusterState
from rota_policy.model.inflight import Restart
from rota_policy.model.slot import Slot

__all__ = ["InFlight", "PlanHold", "hold"]


@dataclass(frozen=True, slots=True)
class PlanHold:
    """What a plan in flight holds for its preemptor this cycle: quota, and the GPUs of its
    target already free, per node index."""

    team: str
    flavor: str
    gpus: float
    """What quota counts of its target: GPUs, or a share's fraction."""
    held: tuple[tuple[int, tuple[int, ...]], ...]


@dataclass(slots=True)
class InFlight:
    """The plans and restarts in flight this cycle, by preemptor (phase 1, `engine`), and the
    readiness of the plans this cycle makes."""

    planned: dict[str, tuple[Slot, ...] | None] = field(default_factory=dict)
    """Preemptors with a plan in flight: their target once every GPU of it is held."""
    plan_holds: dict[str, PlanHold] = field(default_factory=dict)
    restarting: dict[str, Restart] = field(default_factory=dict)
    """Waiting jobs that restart at another size on GPUs held for them (`restarts`); each
    is also in `planned` and `plan_holds`, as a preemptor with a plan in flight is."""
    plan_ready_at: dict[str, float] = field(default_factory=dict)
    """Per preemptor, when its victims are expected to have saved and stopped."""


def hold(state: ClusterState, target: tuple[Slot, ...]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """Hold a plan's target for its preemptor: its GPUs already free, taken; its GPUs that
    shares hold, kept from new shares (`ClusterState.held`). Returns the GPUs taken per node."""
    holds = []
    for slot in target:
        node = state.layout.index[slot.node]
        free = set(state.free[node])
        already = tuple(g for g in slot.gpus if g in free)
        if already:
            state.take_exact(node, already)
            holds.append((node, already))
        shared = state.parts.get(node)
        if shared:
            state.held.update((node, g) for g in slot.gpus if g in shared)
    return tuple(holds)
