"""Backoff with jitter, Retry-After, the dead letter and the rate limit."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from rota_notifier.policy import (
    DeliveryError,
    DeliveryPolicy,
    Status,
    after_failure,
    over_rate_limit,
    parse_retry_after,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = DeliveryPolicy(max_attempts=5, backoff_base_s=10, backoff_max_s=100)


@pytest.mark.parametrize("attempts, low, high", [(1, 5, 10), (2, 10, 20), (3, 20, 40),
                                                 (4, 40, 80), (5, 50, 100), (9, 50, 100)])
def test_backoff_doubles_within_jitter_and_caps(attempts: int, low: float, high: float) -> None:
    rng = random.Random(1)
    for _ in range(50):
        assert low <= POLICY.backoff_s(attempts, rng) <= high


def test_jitter_spreads_retries() -> None:
    rng = random.Random(2)
    assert len({round(POLICY.backoff_s(3, rng), 3) for _ in range(20)}) > 10


def test_transient_failure_retries_until_the_last_attempt() -> None:
    error = DeliveryError("smtp: down", permanent=False)
    for attempts in range(1, 5):
        nxt = after_failure(POLICY, attempts, error, NOW, random.Random(3))
        assert nxt.status == Status.retrying and nxt.next_attempt_at > NOW
    assert after_failure(POLICY, 5, error, NOW, random.Random(3)).status == Status.dead


def test_permanent_failure_is_dead_at_once() -> None:
    nxt = after_failure(POLICY, 1, DeliveryError("HTTP 404", permanent=True), NOW,
                        random.Random(4))
    assert nxt.status == Status.dead


def test_retry_after_wins_even_past_the_cap() -> None:
    error = DeliveryError("429", permanent=False, retry_after_s=300)
    nxt = after_failure(POLICY, 1, error, NOW, random.Random(5))
    assert nxt.next_attempt_at == NOW + timedelta(seconds=300)
    short = DeliveryError("429", permanent=False, retry_after_s=1)
    assert after_failure(POLICY, 1, short, NOW, random.Random(5)).next_attempt_at >= (
        NOW + timedelta(seconds=5))  # never sooner than our own backoff either


def test_rate_limit() -> None:
    policy = DeliveryPolicy(rate_limit=3)
    assert not over_rate_limit(policy, 2, bypass=False)
    assert over_rate_limit(policy, 3, bypass=False)
    assert not over_rate_limit(policy, 99, bypass=True)


@pytest.mark.parametrize("value, expected", [("30", 30.0), (" 2 ", 2.0), ("1.5", 1.5),
                                             (None, None), ("", None), ("soon", None),
                                             ("-1", None)])
def test_parse_retry_after(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected
