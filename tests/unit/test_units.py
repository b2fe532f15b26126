"""GPU counts that may hold shares read as integers when whole (DECISIONS 86)."""

from __future__ import annotations

from rota.units import gpu_count


def test_a_whole_count_stays_an_integer_and_a_fraction_shows() -> None:
    got = [gpu_count(v) for v in (0, 3, 2.0, 0.5, 1.5, 0.75)]
    assert got == [0, 3, 2, 0.5, 1.5, 0.75]
    assert [type(v) for v in got[:3]] == [int, int, int]
