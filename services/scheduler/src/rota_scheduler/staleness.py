"""When a published explanation of a wait has gone stale, and by how much.

A job's JobPending is what `rota why`, the console, the notifier and `rota trace` read, so it
is published again whenever a fresh explanation says something a user would read differently:

- its reason codes, or the words of any reason (who blocks it, what to do); a time written in
  the words ("until 2026-12-07 10:31:00 UTC") is held to the ETA's tolerance instead, so that
  a time that slides with the clock (a run overrunning its estimate) is not news every cycle;
- its position in its flavor's queue;
- whether it has waited past its queue's long-wait threshold;
- its ETA, appearing, vanishing, or moving by more than `eta_tolerance_s`:
  max(60 s, 10% of the wait it had left when published), so an ETA an hour away is not
  republished for a 2-minute drift, one 5 minutes away is for a 61-second one;
- a score factor, moving by more than max(10% of its published value, a floor of 0.1% of the
  largest configured weight): the age factor, which grows with every second of the wait,
  is published again each time it has grown by a tenth.

Pure: no clock but `now`, no I/O. `staleness` also ranks what changed, so that a cycle that may
publish only so many (`plan_actions`' `pending_limit`) publishes the most changed first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

ETA_MIN_TOLERANCE_S = 60.0
"""An ETA that moves by this much or less is not published again, however close it is."""
ETA_TOLERANCE_SHARE = 0.1
"""An ETA is published again when it moves by more than this share of the wait left."""
FACTOR_TOLERANCE_SHARE = 0.1
"""A score factor is published again when it moves by more than this share of its value."""

NEVER = math.inf
"""The staleness of a wait never published: before every other."""
WORDS = 3.0
"""Codes or words changed, or the long-wait threshold crossed."""
PLACE = 2.0
"""The position changed, or an ETA appeared or vanished."""
TIME = 1.0
"""The ETA moved beyond its tolerance (plus up to 1 by how far)."""
SCORE = 0.5
"""Only a score factor moved."""

TIME_IN_WORDS = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?: UTC|Z|[+-]\d{2}:\d{2})")
"""A time as the policy writes one in a reason (`rota_policy.explain.protection.clock`), or ISO 8601."""


@dataclass(frozen=True, slots=True)
class WaitPrint:
    """What a published JobPending said, as much as a fresh explanation is compared with."""

    codes: tuple[str, ...]
    text: int
    """A digest of the reasons' messages without their times (`words`): the view keeps one
    per pending job."""
    eta: float | None
    position: int
    overdue: bool
    factors: tuple[float, ...]
    """queue, age, fairshare, quota_headroom."""
    times: tuple[float, ...] = ()
    """The times written in the reasons' messages, in order (epoch seconds)."""


def text_hash(messages: Iterable[str]) -> int:
    """The reasons' words, digested. Only compared within one process (which folds its view
    from the stream itself), so Python's per-process string hash will do."""
    return hash(tuple(messages))


def words(messages: Iterable[str]) -> tuple[int, tuple[float, ...]]:
    """The reasons' messages as compared: a digest of their words with each time taken out,
    and those times (epoch seconds)."""
    texts, times = [], []
    for message in messages:
        for found in TIME_IN_WORDS.findall(message):
            times.append(_epoch(found))
        texts.append(TIME_IN_WORDS.sub("<time>", message))
    return text_hash(texts), tuple(times)


def _epoch(text: str) -> float:
    iso = text.replace(" UTC", "+00:00").replace("Z", "+00:00").replace(" ", "T", 1)
    return datetime.fromisoformat(iso).timestamp()


def eta_tolerance_s(published_eta: float, now: float) -> float:
    """How far an ETA may move before it is published again: max(60 s, 10% of the wait left
    when it was published, as seen from `now`)."""
    return max(ETA_MIN_TOLERANCE_S, ETA_TOLERANCE_SHARE * (published_eta - now))


def staleness(published: WaitPrint | None, fresh: WaitPrint, now: float, factor_floor: float) -> float:
    """0 when `fresh` says nothing `published` did not, within the tolerances; else how
    stale the published one is (`NEVER`, `WORDS`, `PLACE`, `TIME`, `SCORE`: the largest
    that applies), for ranking."""
    if published is None:
        return NEVER
    if (published.codes != fresh.codes or published.text != fresh.text
            or published.overdue != fresh.overdue):
        return WORDS
    if published.position != fresh.position or (published.eta is None) != (fresh.eta is None):
        return PLACE
    if len(published.times) != len(fresh.times):
        return WORDS
    pairs = list(zip(published.times, fresh.times, strict=True))
    if published.eta is not None and fresh.eta is not None:
        pairs.append((published.eta, fresh.eta))
    moved_most = 0.0
    for old, new in pairs:
        moved = abs(new - old) / eta_tolerance_s(old, now)
        moved_most = max(moved_most, moved)
    if moved_most > 1.0:
        return TIME + min(moved_most, 100.0) / 101.0
    for old, new in zip(published.factors, fresh.factors, strict=False):
        if abs(new - old) > max(FACTOR_TOLERANCE_SHARE * abs(old), factor_floor):
            return SCORE
    return 0.0
