"""GPU shares as victims (DECISIONS 84): stopping a share frees only its quarters of one GPU.

A whole-GPU preemptor gains a shared GPU only once every share on it is a victim; a share
preemptor gains room on a shared GPU once the shares it stops there leave room for its quarters.
The victim searches (`preemption`, `cheapest`) meet victims in one order and credit each to the
nodes it frees GPUs on (`search.credit`); a share is credited here, to its GPU, and reaches
its node's offer only with the shares it needs beside it, so an offer never holds a share whose
stop frees nothing for the preemptor. Both searches credit the same victims in the same order
through this one structure, which keeps their plans equal.
"""

from __future__ import annotations

from collections.abc import Sequence

from rota_policy.admission.placement import ClusterState
from rota_policy.model.snapshot import QUARTERS, Slot
from rota_policy.preemption.victimpool import Ranked

__all__ = ["Choice", "SharedGpus", "describe_freed", "describe_need", "share_target"]

Choice = tuple[int, Ranked]
"""A candidate of one search: (its category for this preemptor, the pool run). Keys end with
the run id, so sorting choices never compares further than (category, key)."""


class SharedGpus:
    """One search's account of the shared GPUs its share victims are on: per GPU, the quarters
    that shares not yet met still hold, and the share victims met there."""

    __slots__ = ("_left", "_met", "held", "index", "need", "parts")

    def __init__(self, state: ClusterState, share: int) -> None:
        self.index, self.parts, self.held = state.layout.index, state.parts, state.held
        self.need = share or QUARTERS
        """The room a GPU must have for the preemptor: its quarters, or the whole GPU."""
        self._left: dict[tuple[int, int], int] = {}
        self._met: dict[tuple[int, int], list[Choice]] = {}

    def credit(
        self, choice: Choice, gained: dict[int, int], prefixes: dict[int, list[Choice]], per_worker: int
    ) -> list[tuple[int, tuple[Choice, ...]]]:
        """`search.credit` for a share victim: its GPU, once it has the preemptor's room,
        adds one GPU to its node (a share preemptor's one worker is then seated)."""
        slot = choice[1].run.placement[0]
        node = self.index[slot.node]
        have = gained.get(node)
        if have is None:
            return []  # enough free already, or its offer is made
        key = (node, slot.gpus[0])
        left = self._left.get(key)
        if left is None:
            # A GPU held for another plan's preemptor gives no room to this one.
            left = QUARTERS + 1 if key in self.held else self.parts.get(node, {}).get(key[1], QUARTERS + 1)
        left -= choice[1].run.share
        self._left[key] = left
        met = self._met.setdefault(key, [])
        met.append(choice)
        if QUARTERS - left < self.need:
            return []
        del self._met[key]
        self._left[key] = QUARTERS + 1  # credited once
        prefix = prefixes.setdefault(node, [])
        prefix.extend(met)
        if have + 1 < per_worker:
            gained[node] = have + 1
            return []
        del gained[node]
        return [(node, tuple(prefix))]


def share_target(state: ClusterState, node: int, runs: Sequence[Slot], share: int) -> tuple[Slot, ...]:
    """A share preemptor's target on `node`: the lowest GPU a whole victim frees there, else
    the GPU its share victims leave room on (`runs`: the victims' slots on the node)."""
    whole = sorted(g for slot in runs if not slot.share for g in slot.gpus)
    gpu = whole[0] if whole else next(slot.gpus[0] for slot in runs if slot.share)
    return (Slot(0, state.layout.names[node], (gpu,), share),)


def _fraction(quarters: int) -> str:
    return f"{quarters / QUARTERS:g}"


def describe_freed(slots: Sequence[Slot], flavor: str) -> str:
    """What stopping the victims frees, for a plan's message: "2 t4 GPUs", "0.5 of one t4 GPU"
    for a share, "2 shares (1) of one t4 GPU" for shares of one GPU; past three shared GPUs,
    only how many (a message stays short)."""
    whole = sum(len(s.gpus) for s in slots if not s.share)
    parts = [f"{whole} {flavor} GPU{'s' if whole != 1 else ''}"] if whole else []
    per_gpu: dict[tuple[str, int], list[int]] = {}
    for s in slots:
        if s.share:
            per_gpu.setdefault((s.node, s.gpus[0]), []).append(s.share)
    if len(per_gpu) > 3:
        return " and ".join([*parts, f"shares of {len(per_gpu)} {flavor} GPUs"])
    for shares in per_gpu.values():
        if len(shares) == 1:
            parts.append(f"{_fraction(shares[0])} of one {flavor} GPU")
        else:
            parts.append(f"{len(shares)} shares ({_fraction(sum(shares))}) of one {flavor} GPU")
    return " and ".join(parts)


def describe_need(gpus: int, share: int, flavor: str) -> str:
    """What a preemptor needs: "8 t4 GPUs", or "0.5 of one t4 GPU" for a share."""
    return f"{_fraction(share)} of one {flavor} GPU" if share else f"{gpus} {flavor} GPUs"
