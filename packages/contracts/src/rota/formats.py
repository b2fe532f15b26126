"""How every command prints ids, times and scores, so that a job reads the same in all.

- A job, run or plan id: the full id where it heads an answer (`rota why`, `rota trace`), with
  `-o wide` and in `--json`; elsewhere its short id, the last 12 hex digits
  (`rota.ids.short_id`), which every command takes back. Never a prefix: the leading digits of
  a UUIDv7 are its timestamp, which ids made in the same moment share.
- A moment: `2026-12-07 16:47:07 UTC`, to the second and always in UTC (`--json` keeps the
  full ISO 8601 time).
- How long ago, in a table's column: `45s`, `12m`, `3h`, `2d`, as kubectl prints ages.
- A score: every factor and then the total, one decimal each, `queue=1000.0  age=0.6 ...
  total=6000.6`, as `rota why` and the console show it.

A value that is not what it should be (these answers carry teams' text) prints as `-`, never
as an error that loses the rest of the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from rota.ids import short_id

NONE = "-"


def short(value: Any) -> str:
    """An id as the default columns and prose print it, or `-`."""
    return short_id(value) if isinstance(value, str) and value else NONE


def parse_time(value: Any) -> datetime | None:
    """A time from an answer (aware, UTC when it has no zone), or None when there is none or
    it is not a time."""
    if isinstance(value, datetime):
        at = value
    elif isinstance(value, str) and value:
        try:
            at = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    else:
        return None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def moment(value: Any) -> str:
    """`2026-12-07 16:47:07 UTC`, or `-`."""
    at = parse_time(value)
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if at is not None else NONE


def age(value: Any, now: datetime | None = None) -> str:
    """How long ago, in the unit that keeps it short: `45s`, `12m`, `3h`, `2d`, or `-`."""
    at = parse_time(value)
    if at is None:
        return NONE
    seconds = max(0, int(((now or datetime.now(UTC)) - at).total_seconds()))
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def score(factors: Mapping[str, Any] | None) -> str:
    """A decision's score factors and then its total, or `` when there are none."""
    numbers: dict[str, float] = {}
    for name, value in (factors or {}).items():
        try:
            numbers[str(name)] = float(value)
        except (TypeError, ValueError):
            continue
    total = numbers.pop("total", None)
    parts = [f"{name}={value:.1f}" for name, value in numbers.items()]
    if total is not None:
        parts.append(f"total={total:.1f}")
    return "  ".join(parts)
