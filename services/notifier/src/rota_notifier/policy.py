"""Delivery policy: backoff with jitter, Retry-After, the dead letter, the rate limit. Pure."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from rota.settings import Settings


class Status:
    pending = "pending"
    sending = "sending"
    retrying = "retrying"
    sent = "sent"
    held = "held"
    """Over the recipient's rate limit: waits to go out in one digest."""
    digested = "digested"
    dead = "dead"


DUE_STATUSES = (Status.pending, Status.retrying, Status.sending)


class DeliveryError(Exception):
    """A send that did not happen. `permanent` ends in the dead letter at once.

    Messages must already be free of secrets; the dispatcher redacts them again anyway.
    """

    def __init__(self, message: str, *, permanent: bool, retry_after_s: float | None = None):
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class DeliveryPolicy:
    max_attempts: int = 8
    backoff_base_s: float = 10.0
    backoff_max_s: float = 900.0
    rate_limit: int = 10
    rate_window_s: float = 3600.0
    send_timeout_s: float = 60.0

    @classmethod
    def from_settings(cls, settings: Settings) -> DeliveryPolicy:
        return cls(
            max_attempts=settings.notifier_max_attempts,
            backoff_base_s=settings.notifier_backoff_base_s,
            backoff_max_s=settings.notifier_backoff_max_s,
            rate_limit=settings.notifier_rate_limit,
            rate_window_s=settings.notifier_rate_window_s,
            send_timeout_s=settings.notifier_send_timeout_s,
        )

    def backoff_s(self, attempts: int, rng: random.Random) -> float:
        """Exponential, capped, with "equal jitter": half fixed, half random.

        The fixed half keeps a flapping server from being hammered; the random half keeps
        many notifications that failed together from retrying together.
        """
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** max(attempts - 1, 0))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


@dataclass(frozen=True)
class Next:
    status: str
    next_attempt_at: datetime


def after_failure(
    policy: DeliveryPolicy, attempts: int, error: DeliveryError, now: datetime,
    rng: random.Random,
) -> Next:
    """Where a failed send goes: the dead letter, or a retry no sooner than Retry-After."""
    if error.permanent or attempts >= policy.max_attempts:
        return Next(Status.dead, now)
    delay = policy.backoff_s(attempts, rng)
    if error.retry_after_s is not None:
        # The server said when; honour it even past our cap, never sooner.
        delay = max(delay, error.retry_after_s)
    return Next(Status.retrying, now + timedelta(seconds=delay))


def over_rate_limit(policy: DeliveryPolicy, recent_sends: int, bypass: bool) -> bool:
    """True when this message should wait for a digest instead of going out now."""
    return not bypass and recent_sends >= policy.rate_limit


def parse_retry_after(value: str | None) -> float | None:
    """Slack sends whole seconds; be lenient with anything else."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
