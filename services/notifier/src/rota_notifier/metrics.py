"""The notifier's metrics: each send attempt's result, by channel.

Counted once the attempt's result is committed (`sent`, `retrying` or `dead`); a message held
by the rate limit is not an attempt, and goes out later in a digest, which is one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rota import metrics


@metrics.never_raises
def record_sends(rows: Iterable[Any], outcomes: Iterable[str]) -> None:
    for row, outcome in zip(rows, outcomes, strict=True):
        metrics.NOTIFICATIONS.labels(channel=str(row.channel), outcome=str(outcome)).inc()
