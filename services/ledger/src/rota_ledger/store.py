"""The ledger's tables (schema `ledger`) and the queries on them. Every function runs inside
the caller's transaction; none commits."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from rota.db.chunks import chunks, row_chunks
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from rota_ledger.domain import QUARTERS, Gpu, Seat
from rota_ledger.usage import Usage

SCHEMA = "ledger"
metadata = sa.MetaData(schema=SCHEMA)

allocations = sa.Table(
    "allocations",
    metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("node", sa.Text, nullable=False),
    sa.Column("gpu", sa.Integer, nullable=False),
    sa.Column("worker", sa.Integer, nullable=False),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("job_id", sa.Text, nullable=False),
    sa.Column("proposal_id", sa.Text, nullable=False),
    sa.Column("plan_id", sa.Text),
    sa.Column("team", sa.Text, nullable=False),
    sa.Column("user_name", sa.Text, nullable=False),
    sa.Column("queue", sa.Text, nullable=False),
    sa.Column("flavor", sa.Text, nullable=False),
    sa.Column("borrowed", sa.Boolean, nullable=False),
    sa.Column("granted_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("released_at", sa.DateTime(timezone=True)),
    sa.Column("release_reason", sa.Text),
    sa.Column("share", sa.Integer, nullable=False, server_default="0"),
    # Quarters of the GPU a GPU share holds (DECISIONS 66); 0: the GPU whole.
)

gpu_claims = sa.Table(
    "gpu_claims",
    metadata,
    sa.Column("node", sa.Text, primary_key=True),
    sa.Column("gpu", sa.Integer, primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("used", sa.Integer, nullable=False),
)
"""One row per GPU in use: `whole` (used 4), or `shared` with the quarters its shares hold
(never above 4, a CHECK). Written in the grant's and the release's transactions (0004)."""
WHOLE, SHARED = "whole", "shared"

entries = sa.Table(
    "entries",
    metadata,
    sa.Column("seq", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("run_id", sa.Text, nullable=False),
    sa.Column("job_id", sa.Text, nullable=False),
    sa.Column("team", sa.Text, nullable=False),
    sa.Column("user_name", sa.Text, nullable=False),
    sa.Column("flavor", sa.Text, nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("borrowed_gpus", sa.Integer, nullable=False),
    sa.Column("gpu_seconds", sa.Float, nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("cause_id", sa.Text, nullable=False),
)

usage = sa.Table(
    "usage",
    metadata,
    sa.Column("team", sa.Text, primary_key=True),
    sa.Column("user_name", sa.Text, primary_key=True),
    sa.Column("gpu_seconds", sa.Float, nullable=False),
    sa.Column("as_of", sa.DateTime(timezone=True), nullable=False),
)
TEAM_TOTAL = ""
"""`usage.user_name` of a team's own row."""

holds = sa.Table(
    "holds",
    metadata,
    sa.Column("plan_id", sa.Text, primary_key=True),
    sa.Column("node", sa.Text, primary_key=True),
    sa.Column("gpu", sa.Integer, primary_key=True),
    sa.Column("preemptor_job_id", sa.Text, nullable=False),
    sa.Column("victim_run_id", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
)

def _active() -> sa.ColumnElement[bool]:
    return allocations.c.released_at.is_(None)


async def lock_flavor(conn: AsyncConnection, flavor: str) -> None:
    """Serialise the decisions on one flavor until commit. Quota and lending limits are sums
    over many rows, which no row constraint can guard; two proposals deciding at once could
    each see room that only one of them may take."""
    key = zlib.crc32(f"ledger-flavor:{flavor}".encode())
    await conn.execute(sa.select(sa.func.pg_advisory_xact_lock(key)))


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What every row of one allocation shares."""

    run_id: str
    job_id: str
    proposal_id: str
    plan_id: str | None
    team: str
    user: str
    queue: str
    flavor: str


async def add_entry(
    conn: AsyncConnection, *, kind: str, run: RunInfo, gpus: int, borrowed_gpus: int,
    gpu_seconds: float, at: datetime, cause_id: str,
) -> bool:
    """Append one ledger entry; False if this run already has an entry of this kind."""
    result = await conn.execute(
        insert(entries).values(entry_row(kind, run, gpus, borrowed_gpus, gpu_seconds, at, cause_id))
        .on_conflict_do_nothing(constraint="entries_once_per_run")
    )
    return bool(result.rowcount)


def entry_row(kind: str, run: RunInfo, gpus: int, borrowed_gpus: int, gpu_seconds: float,
              at: datetime, cause_id: str) -> dict[str, object]:
    return dict(kind=kind, run_id=run.run_id, job_id=run.job_id, team=run.team,
                user_name=run.user, flavor=run.flavor, gpus=gpus, borrowed_gpus=borrowed_gpus,
                gpu_seconds=gpu_seconds, at=at, cause_id=cause_id)


@dataclass(frozen=True, slots=True)
class Released:
    run: RunInfo
    gpus: int
    borrowed_gpus: int
    granted_at: datetime
    released_at: datetime
    demand: float = 0.0
    """What usage counts: its GPUs, a GPU share its fraction of one (0.0: `gpus`)."""

    @property
    def gpu_demand(self) -> float:
        return self.demand or self.gpus


Claimed = tuple[str, int, int]
"""(node, GPU index, quarters of a share or 0 for the GPU whole): one seat's claim."""


async def claim_seats(conn: AsyncConnection, grants: Sequence[tuple[RunInfo, Sequence[Seat]]]) -> set[str]:
    """Claim every grant's GPUs, each grant all or none: the run ids that could not have all
    theirs, with none of their claims left. A whole GPU claims its row only if there is none;
    a share adds its quarters to a shared row only while they stay within one GPU. In GPU
    order, so that writers racing for the same GPUs wait on each other, never deadlock."""
    seats = sorted(((s.node, s.gpu, s.share, run.run_id) for run, ss in grants for s in ss))
    got: dict[str, list[Claimed]] = {}
    whole = [dict(node=n, gpu=g, kind=WHOLE, used=QUARTERS) for n, g, q, _ in seats if not q]
    claimed: set[Gpu] = set()
    for chunk in row_chunks(gpu_claims, whole):
        result = await conn.execute(insert(gpu_claims).on_conflict_do_nothing()
                                    .returning(gpu_claims.c.node, gpu_claims.c.gpu), list(chunk))
        claimed |= {(r.node, r.gpu) for r in result}
    for node, gpu, share, run_id in seats:
        if not share:
            ok = (node, gpu) in claimed
        else:
            stmt = insert(gpu_claims).values(node=node, gpu=gpu, kind=SHARED, used=share)
            used = gpu_claims.c.used + stmt.excluded.used
            ok = (await conn.execute(stmt.on_conflict_do_update(
                index_elements=["node", "gpu"], set_={"used": used},
                where=sa.and_(gpu_claims.c.kind == SHARED, used <= QUARTERS),
            ).returning(gpu_claims.c.node))).first() is not None
        if ok:
            got.setdefault(run_id, []).append((node, gpu, share))
    failed = {run.run_id for run, ss in grants if len(got.get(run.run_id, ())) != len(ss)}
    await unclaim(conn, [c for run_id in sorted(failed) for c in got.get(run_id, ())])
    return failed


async def unclaim(conn: AsyncConnection, claims: Sequence[Claimed]) -> None:
    """Give back claims: a whole GPU's row goes; a share takes its quarters off its GPU's
    row, which goes with its last share."""
    whole = sorted({(n, g) for n, g, q in claims if not q})
    for part in chunks(whole, 2):
        await conn.execute(sa.delete(gpu_claims).where(
            gpu_claims.c.kind == WHOLE, sa.tuple_(gpu_claims.c.node, gpu_claims.c.gpu).in_(part)))
    shared = sorted((n, g, q) for n, g, q in claims if q)
    for node, gpu, share in shared:
        at = sa.and_(gpu_claims.c.node == node, gpu_claims.c.gpu == gpu, gpu_claims.c.kind == SHARED)
        await conn.execute(sa.update(gpu_claims).where(at).values(used=gpu_claims.c.used - share))
    if shared:
        await conn.execute(sa.delete(gpu_claims).where(
            gpu_claims.c.kind == SHARED, gpu_claims.c.used <= 0,
            sa.tuple_(gpu_claims.c.node, gpu_claims.c.gpu).in_(sorted({(n, g) for n, g, _ in shared}))))


async def release_run(
    conn: AsyncConnection, run_id: str, at: datetime, reason: str
) -> Released | None:
    """Release every active row of `run_id` at `at` (never before its grant). None when the
    run holds nothing: unknown, or released already."""
    rows = (
        await conn.execute(
            sa.update(allocations)
            .where(_active(), allocations.c.run_id == run_id)
            .values(released_at=sa.func.greatest(allocations.c.granted_at, at),
                    release_reason=reason)
            .returning(*allocations.c)
        )
    ).all()
    if not rows:
        return None
    await unclaim(conn, [(r.node, r.gpu, r.share) for r in rows])
    first = rows[0]
    run = RunInfo(first.run_id, first.job_id, first.proposal_id, first.plan_id, first.team,
                  first.user_name, first.queue, first.flavor)
    demand = sum(r.share / QUARTERS if r.share else 1 for r in rows)
    return Released(run, len(rows), sum(1 for r in rows if r.borrowed), first.granted_at,
                    first.released_at, demand)


async def add_usage(
    conn: AsyncConnection, team: str, user: str, amount: float, at: datetime, half_life_s: float
) -> None:
    """Add `amount` decayed GPU-seconds, valued at `at`, to the row; creates it if new."""
    await conn.execute(
        insert(usage).values(team=team, user_name=user, gpu_seconds=0.0, as_of=at)
        .on_conflict_do_nothing()
    )
    row = (
        await conn.execute(
            sa.select(usage.c.gpu_seconds, usage.c.as_of)
            .where(usage.c.team == team, usage.c.user_name == user).with_for_update()
        )
    ).one()
    updated = Usage(row.gpu_seconds, row.as_of).plus(amount, at, half_life_s)
    await conn.execute(
        sa.update(usage).where(usage.c.team == team, usage.c.user_name == user)
        .values(gpu_seconds=updated.gpu_seconds, as_of=updated.as_of)
    )


async def usage_rows(conn: AsyncConnection, team: str | None = None) -> list[tuple[str, str, Usage]]:
    """(team, user or TEAM_TOTAL, usage): every team's total, and the users of `team`."""
    query = sa.select(usage)
    if team is not None:
        query = query.where(sa.or_(usage.c.user_name == TEAM_TOTAL, usage.c.team == team))
    return [(r.team, r.user_name, Usage(r.gpu_seconds, r.as_of))
            for r in await conn.execute(query.order_by(usage.c.team, usage.c.user_name))]


async def active_gpus_of_runs(conn: AsyncConnection, run_ids: Sequence[str]) -> list[tuple[str, Gpu]]:
    """(run_id, GPU) for every active row of those runs."""
    rows = await conn.execute(
        sa.select(allocations.c.run_id, allocations.c.node, allocations.c.gpu)
        .where(_active(), allocations.c.run_id.in_(list(run_ids)))
    )
    return [(r.run_id, (r.node, r.gpu)) for r in rows]


async def add_holds(
    conn: AsyncConnection, *, plan_id: str, preemptor_job_id: str,
    gpus: Iterable[tuple[Gpu, str | None]], created_at: datetime, ttl_s: float,
) -> int:
    values = [
        dict(plan_id=plan_id, node=node, gpu=gpu, victim_run_id=victim,
             preemptor_job_id=preemptor_job_id, created_at=created_at,
             expires_at=created_at + timedelta(seconds=ttl_s))
        for (node, gpu), victim in gpus
    ]
    added = 0
    for chunk in row_chunks(holds, values):
        result = await conn.execute(insert(holds).values(list(chunk)).on_conflict_do_nothing())
        added += int(result.rowcount)
    return added


async def clear_holds(conn: AsyncConnection, plan_id: str | None, preemptor_job_id: str | None = None) -> int:
    """Drop a plan's holds, and (with `preemptor_job_id`) those of any plan for that job."""
    result = await conn.execute(sa.delete(holds).where(sa.or_(
        holds.c.plan_id == plan_id, holds.c.preemptor_job_id == preemptor_job_id
    )))
    return int(result.rowcount)


async def plan_granted(conn: AsyncConnection, plan_id: str) -> bool:
    query = sa.select(sa.literal(1)).where(allocations.c.plan_id == plan_id).limit(1)
    return (await conn.execute(query)).first() is not None


async def prune_holds(conn: AsyncConnection, now: datetime) -> int:
    """Expired holds already count for nothing; this only keeps the table small."""
    result = await conn.execute(sa.delete(holds).where(holds.c.expires_at <= now))
    return int(result.rowcount)


async def list_allocations(
    conn: AsyncConnection, *, active_only: bool, limit: int, job_id: str | None
) -> list[dict[str, Any]]:
    """One dict per run, its GPUs grouped back into the placement it was granted."""
    a = allocations.c
    runs = (
        sa.select(a.run_id, sa.func.min(a.granted_at).label("granted_at"))
        .group_by(a.run_id)
    )
    if active_only:
        runs = runs.where(_active())
    if job_id is not None:
        runs = runs.where(a.job_id == job_id)
    # Grant time, then insertion order (`id`) among runs granted in the same instant.
    order = (sa.func.min(a.granted_at), sa.func.min(a.id))
    runs = runs.order_by(*(order if active_only else (o.desc() for o in order))).limit(limit)
    run_ids = [row.run_id for row in await conn.execute(runs)]
    if not run_ids:
        return []
    rows = (
        await conn.execute(
            sa.select(allocations).where(a.run_id.in_(run_ids))
            .order_by(a.run_id, a.worker, a.node, a.gpu)
        )
    ).all()
    by_run: dict[str, list[Any]] = {}
    for row in rows:
        by_run.setdefault(row.run_id, []).append(row)
    return [_run_view(by_run[run_id]) for run_id in run_ids]


def _run_view(rows: list[Any]) -> dict[str, Any]:
    first = rows[0]
    workers: dict[tuple[int, str], list[int]] = {}
    shares: dict[tuple[int, str], float] = {}
    for row in rows:
        workers.setdefault((row.worker, row.node), []).append(row.gpu)
        if row.share:
            shares[(row.worker, row.node)] = row.share / QUARTERS
    return {
        "run_id": first.run_id, "job_id": first.job_id, "proposal_id": first.proposal_id,
        "plan_id": first.plan_id, "team": first.team, "user": first.user_name,
        "queue": first.queue, "flavor": first.flavor, "gpus": len(rows),
        "borrowed_gpus": sum(1 for r in rows if r.borrowed),
        "placement": [{"worker": w, "node": node, "gpus": gpus,
                       **({"gpu_share": shares[(w, node)]} if (w, node) in shares else {})}
                      for (w, node), gpus in sorted(workers.items())],
        "granted_at": first.granted_at.isoformat(),
        "released_at": first.released_at.isoformat() if first.released_at else None,
        "release_reason": first.release_reason,
    }
