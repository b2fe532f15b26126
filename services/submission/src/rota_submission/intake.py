"""Per-team intake limits: how many of a team's jobs may wait, and how fast it may add more.

Decided in the transaction that records the jobs, under a lock on the team's row of
`team_intake`, so that replicas (and the request/reply path beside the JetStream one) see
one another's jobs and share one bucket per team. A resubmission that names a job already
recorded is answered as before and passes no limit: it adds nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from rota.config import RotaConfig
from rota.config.model import Intake
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from rota_submission.domain import Rejection
from rota_submission.store import jobs, metadata

team_intake = sa.Table(
    "team_intake",
    metadata,
    sa.Column("team", sa.Text, primary_key=True),
    sa.Column("tokens", sa.Float, nullable=False),
    sa.Column("refilled_at", sa.DateTime(timezone=True), nullable=False),
)


def refilled(tokens: float, since: datetime, now: datetime, limits: Intake) -> float:
    """The bucket after the time from `since` to `now`: `submit_rate_per_s` tokens a second,
    never above `submit_burst`. A clock that went back refills nothing."""
    elapsed = max(0.0, (now - since).total_seconds())
    return min(float(limits.submit_burst), tokens + elapsed * limits.submit_rate_per_s)


@dataclass
class TeamGate:
    """One team's limits as one transaction sees them: its waiting jobs and its tokens."""

    team: str
    limits: Intake
    pending: int
    tokens: float

    def admit(self) -> Rejection | None:
        """Let one new job in (counting it), or say which limit refuses it. The pending limit
        is checked first, so a refused job spends no token."""
        limits = self.limits
        if self.pending >= limits.max_pending:
            return Rejection(
                "PENDING_LIMIT", "team",
                f"team {self.team!r} has {self.pending} jobs waiting, its limit"
                f" (intake.max_pending: {limits.max_pending}); submit again when some have started",
            )
        if self.tokens < 1.0:
            retry_s = (1.0 - self.tokens) / limits.submit_rate_per_s
            return Rejection(
                "RATE_LIMITED", "team",
                f"team {self.team!r} may submit {limits.submit_rate_per_s:g} jobs/s, at most"
                f" {limits.submit_burst} at once (intake.submit_rate_per_s, intake.submit_burst);"
                f" retry in {max(retry_s, 0.1):.1f} s",
            )
        self.pending += 1
        self.tokens -= 1.0
        return None


async def open_gates(conn: AsyncConnection, teams: set[str], config: RotaConfig,
                     now: datetime) -> dict[str, TeamGate]:
    """Lock each team's bucket (created full the first time), in name order so that two
    transactions never wait on each other, and count its waiting jobs under that lock."""
    if not teams:
        return {}
    ordered = sorted(teams)
    limits = {team: config.intake_for(team) for team in ordered}
    await conn.execute(insert(team_intake).on_conflict_do_nothing(), [
        {"team": team, "tokens": float(limits[team].submit_burst), "refilled_at": now}
        for team in ordered])
    rows = (await conn.execute(
        sa.select(team_intake).where(team_intake.c.team.in_(ordered))
        .order_by(team_intake.c.team).with_for_update())).all()
    gates = {}
    for row in rows:
        team = str(row.team)
        gates[team] = TeamGate(team, limits[team], await _waiting(conn, team, limits[team]),
                               refilled(row.tokens, row.refilled_at, now, limits[team]))
    return gates


async def _waiting(conn: AsyncConnection, team: str, limits: Intake) -> int:
    """The team's waiting jobs, counted no further than its limit: the count costs at most
    `max_pending` index entries however deep the queue (`jobs_pending_by_team`)."""
    waiting = (sa.select(sa.literal(1)).select_from(jobs)
               .where(jobs.c.team == team, jobs.c.state == "pending")
               .limit(limits.max_pending).subquery())
    return int((await conn.execute(sa.select(sa.func.count()).select_from(waiting))).scalar_one())


async def close_gates(conn: AsyncConnection, gates: dict[str, TeamGate], now: datetime) -> None:
    """Store each bucket as this transaction leaves it."""
    for gate in gates.values():
        tokens = gate.tokens if math.isfinite(gate.tokens) else 0.0
        await conn.execute(team_intake.update().where(team_intake.c.team == gate.team)
                           .values(tokens=tokens, refilled_at=now))
