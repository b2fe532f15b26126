"""Quantities as people read them."""

from __future__ import annotations

SMALL_GPU_SECONDS = 360.0
"""Below a tenth of a GPU-hour, hours would round to nothing: GPU-seconds instead."""


def gpu_time(seconds: float) -> str:
    """GPU time, such as work lost to a preemption: `10.3 GPU-s`, or `1.50 GPU-h`."""
    if seconds < SMALL_GPU_SECONDS:
        return f"{seconds:.1f} GPU-s"
    return f"{seconds / 3600:.2f} GPU-h"


def gpu_count(value: float) -> int | float:
    """A GPU count that may hold shares: whole as an integer, as before shares, so a reader of
    whole counts sees the numbers it always did; with a fraction in it, the fraction (1.5)."""
    number = float(value)
    return int(number) if number.is_integer() else number
