"""What the replay keeps of the nodes (`NodeBook`): each node's free GPUs, the GPUs that GPU
shares hold in part, and how many GPUs are held, as runs start and stop.

A share's first quarter takes its GPU out of the free GPUs and its last gives it back; the
shares on one GPU never exceed four quarters (DECISIONS 66), which a booking that would break
it stops the replay for, as the ledger's rows refuse it in the live system.
"""

from __future__ import annotations

from collections.abc import Iterable

from rota_policy.model.snapshot import QUARTERS, NodeState, Slot

__all__ = ["NodeBook"]


class NodeBook:
    __slots__ = ("free", "held", "index", "parts", "states")

    def __init__(self, nodes: tuple[NodeState, ...]) -> None:
        self.states = list(nodes)
        """Each node as the policy sees it, rebuilt when its GPUs change."""
        self.free = [list(n.free) for n in nodes]
        self.parts: list[dict[int, int]] = [dict(n.shared) for n in nodes]
        """Per node, the GPUs that shares hold in part: GPU index -> quarters."""
        self.index = {n.name: i for i, n in enumerate(nodes)}
        self.held = sum(n.gpus - len(n.free) for n in nodes)
        """GPUs not free: held whole, or by one share or more."""

    def take(self, placement: Iterable[Slot]) -> None:
        for slot in placement:
            idx = self.index[slot.node]
            if slot.share:
                self._take_share(idx, slot.gpus[0], slot.share)
            else:
                free = self.free[idx]
                for g in slot.gpus:
                    free.remove(g)
                self.held += len(slot.gpus)
            self._changed(idx)

    def give(self, placement: Iterable[Slot]) -> None:
        for slot in placement:
            idx = self.index[slot.node]
            if not slot.share or self._give_share(idx, slot.gpus[0], slot.share):
                free = self.free[idx]
                free.extend(slot.gpus)
                free.sort()
                self.held -= len(slot.gpus)
            self._changed(idx)

    def _take_share(self, idx: int, gpu: int, share: int) -> None:
        parts = self.parts[idx]
        if gpu not in parts:
            self.free[idx].remove(gpu)
            self.held += 1
        held = parts.get(gpu, 0) + share
        if held > QUARTERS:
            raise AssertionError(f"GPU {gpu} of node {self.states[idx].name} would hold {held} quarters")
        parts[gpu] = held

    def _give_share(self, idx: int, gpu: int, share: int) -> bool:
        """True when the share was the GPU's last, which the caller gives back."""
        parts = self.parts[idx]
        left = parts[gpu] - share
        if left:
            parts[gpu] = left
            return False
        del parts[gpu]
        return True

    def _changed(self, idx: int) -> None:
        n, parts = self.states[idx], self.parts[idx]
        self.states[idx] = NodeState(n.name, n.flavor, n.rack, n.gpus, tuple(self.free[idx]), n.levels,
                                     tuple(sorted(parts.items())) if parts else ())
