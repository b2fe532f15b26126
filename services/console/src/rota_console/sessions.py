"""The console's logins, held here rather than believed from a cookie, and the limit on how
often one address may try to log in.

The signed cookie carries only a random session id (and the form token). What a session is,
whose it is and until when, is this table's: logging out deletes the row, so a copy of the
cookie is worthless afterwards, and a session ends when its credentials expire. The table is
the process's own: a restart, or another replica, asks everyone to log in again.
"""

from __future__ import annotations

import secrets
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta

from rota.clock import Clock

MAX_SESSIONS = 10_000
"""Live sessions kept; past it the one nearest its end goes first (the login limit keeps a
flood from one address away, this bounds the memory whatever happens)."""

MAX_TRACKED_ADDRESSES = 10_000


@dataclass(frozen=True)
class Session:
    team: str
    expires_at: datetime


class SessionBook:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._live: dict[str, Session] = {}

    def open(self, team: str, expires_at: datetime) -> str:
        """A new session's id: random, so no one can choose or guess the id a viewer gets."""
        now = self._clock.now()
        self._live = {sid: s for sid, s in self._live.items() if s.expires_at > now}
        if len(self._live) >= MAX_SESSIONS:
            del self._live[min(self._live, key=lambda sid: self._live[sid].expires_at)]
        session_id = secrets.token_urlsafe(32)
        self._live[session_id] = Session(team, expires_at)
        return session_id

    def team(self, session_id: object) -> str | None:
        """The team of a live session; None for an unknown, closed or expired one."""
        if not isinstance(session_id, str):
            return None
        session = self._live.get(session_id)
        if session is None:
            return None
        if session.expires_at <= self._clock.now():
            del self._live[session_id]
            return None
        return session.team

    def close(self, session_id: object) -> None:
        if isinstance(session_id, str):
            self._live.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._live)


class LoginLimiter:
    """At most `attempts` logins per address per `window_s`: each attempt makes the console
    open a NATS connection, and a limit makes guessing at credentials pointless."""

    def __init__(self, clock: Clock, *, attempts: int, window_s: float = 60.0) -> None:
        self._clock = clock
        self._attempts = attempts
        self._window = timedelta(seconds=window_s)
        self._seen: dict[str, deque[datetime]] = {}

    def retry_after_s(self, address: str) -> float | None:
        """None when this attempt may go ahead (and it is counted); else how long to wait."""
        now = self._clock.now()
        if len(self._seen) >= MAX_TRACKED_ADDRESSES:
            self._seen = {a: t for a, t in self._seen.items() if t and t[-1] > now - self._window}
        times = self._seen.setdefault(address, deque())
        while times and times[0] <= now - self._window:
            times.popleft()
        if len(times) >= self._attempts:
            return max((times[0] + self._window - now).total_seconds(), 1.0)
        times.append(now)
        return None
