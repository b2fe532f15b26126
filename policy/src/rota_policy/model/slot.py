"""One gang member's GPUs (`Slot`): what placements, runs, plans and restarts are made of.
Re-exported by `model`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Slot"]


@dataclass(frozen=True, slots=True)
class Slot:
    """One gang member's share of a placement: a node and the GPU indices on it."""

    worker: int
    node: str
    gpus: tuple[int, ...]
    share: int = 0
    """Quarters (1-3) of the one GPU in `gpus` that this worker holds (a GPU share, DECISIONS
    66); 0: it holds the GPUs in `gpus` whole."""
