"""Decay math: half-lives, the run integral, and order-independent accumulation."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rota_ledger.usage import Usage, decay, run_usage

H = 3600.0
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "elapsed", "expected"),
    [(100.0, 0.0, 100.0), (100.0, H, 50.0), (100.0, 2 * H, 25.0), (100.0, -H, 100.0), (0.0, H, 0.0)],
)
def test_decay_halves_every_half_life(value: float, elapsed: float, expected: float) -> None:
    assert decay(value, elapsed, H) == pytest.approx(expected)


def test_a_short_run_counts_almost_all_its_gpu_seconds() -> None:
    assert run_usage(8, 60.0, H) == pytest.approx(480.0, rel=1e-2)
    assert run_usage(8, 60.0, H) < 480.0


def test_a_run_of_one_half_life_counts_its_integral() -> None:
    # ∫ 2^(-(H-t)/H) dt over [0, H] = H / (2 ln 2)
    assert run_usage(1, H, H) == pytest.approx(H / (2 * math.log(2)))


def test_an_endless_run_saturates_at_its_rate_times_the_mean_life() -> None:
    assert run_usage(2, 1e9, H) == pytest.approx(2 * H / math.log(2))


@pytest.mark.parametrize(("gpus", "duration"), [(0, 100.0), (4, 0.0), (4, -5.0)])
def test_nothing_used_counts_nothing(gpus: int, duration: float) -> None:
    assert run_usage(gpus, duration, H) == 0.0


def test_usage_decays_to_the_later_event() -> None:
    row = Usage(100.0, T0).plus(10.0, T0 + timedelta(seconds=H), H)
    assert row == Usage(60.0, T0 + timedelta(seconds=H))


def test_a_late_event_is_decayed_to_the_row_and_never_moves_it_back() -> None:
    row = Usage(100.0, T0 + timedelta(seconds=H)).plus(10.0, T0, H)
    assert row.as_of == T0 + timedelta(seconds=H)
    assert row.gpu_seconds == pytest.approx(105.0)


additions = st.lists(
    st.tuples(st.floats(0, 1e6), st.integers(0, 30 * 86_400)), min_size=1, max_size=20
)


@given(additions, st.randoms(use_true_random=False))
def test_the_order_of_events_does_not_change_usage(adds: list[tuple[float, int]], rnd: object) -> None:
    """Releases arrive in any order across consumers; the decayed total must not care."""
    def total(order: list[tuple[float, int]]) -> float:
        row = Usage(0.0, T0)
        for amount, offset in order:
            row = row.plus(amount, T0 + timedelta(seconds=offset), H)
        return row.decayed_to(T0 + timedelta(days=31), H)

    shuffled = list(adds)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert total(shuffled) == pytest.approx(total(adds), rel=1e-9, abs=1e-6)


@given(st.integers(0, 64), st.floats(0, 1e8), st.floats(1, 1e7))
def test_run_usage_is_never_negative_nor_more_than_raw(gpus: int, duration: float, half_life: float) -> None:
    used = run_usage(gpus, duration, half_life)
    assert 0.0 <= used <= gpus * duration * (1 + 1e-9) + 1e-9
