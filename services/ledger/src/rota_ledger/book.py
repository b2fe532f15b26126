"""A batch of proposals decided on one read of the ledger's rows.

Reading the rows per proposal costs a round trip each while the flavor locks are held. `read`
fetches the rows every proposal of the batch bears on at once; `Book` hands each proposal the
`Snapshot` of the tables at its turn, and folds each grant in (GPUs taken, the team's use, the
run seen, the preemptor's holds cleared) so the next proposal sees it as it would have seen
it in the tables. The writes of the batch then go in with one multi-row statement per table
(per few thousand rows: `rota.db.chunks`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from rota.db.chunks import chunks, row_chunks
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from rota_ledger.domain import QUARTERS, Gpu, Seat, Snapshot
from rota_ledger.store import RunInfo, allocations, claim_seats, entries, entry_row, holds, unclaim


@dataclass(frozen=True, slots=True)
class Hold:
    plan_id: str
    preemptor_job_id: str
    gpu: Gpu


@dataclass
class Book:
    taken: dict[Gpu, str] = field(default_factory=dict)
    """GPUs allocated whole → the run holding each."""
    shared: dict[Gpu, int] = field(default_factory=dict)
    """GPUs that GPU shares hold in part → the quarters they hold."""
    holds: list[Hold] = field(default_factory=list)
    in_use: dict[str, dict[str, float]] = field(default_factory=dict)
    """flavor → team → active GPUs (a share counts its fraction)."""
    runs_seen: set[str] = field(default_factory=set)

    def snapshot(self, run: RunInfo, wanted: Sequence[Gpu]) -> tuple[Snapshot, bool]:
        """The proposal's rows (requested GPUs taken or held for another job, the flavor's use
        per team, whether its run was ever allocated), and whether it has unexpired holds of
        its own: its plan's, or any plan's whose preemptor is this very job (a scheduler that
        lost the plan id must not be locked out of its GPUs)."""
        want = set(wanted)
        own = False
        held: dict[Gpu, str] = {}
        for hold in self.holds:
            if hold.plan_id == run.plan_id or hold.preemptor_job_id == run.job_id:
                own = True
            elif hold.gpu in want:
                held[hold.gpu] = hold.plan_id
        taken = {gpu: self.taken[gpu] for gpu in wanted if gpu in self.taken}
        shared = {gpu: self.shared[gpu] for gpu in wanted if gpu in self.shared}
        return Snapshot(taken=taken, held=held, in_use=dict(self.in_use.get(run.flavor, {})),
                        shared=shared, run_seen=run.run_id in self.runs_seen), own

    def grant(self, run: RunInfo, seats: Sequence[Seat], own_holds: bool) -> None:
        """Fold a grant in, as its rows (and its cleared holds) would show in the tables."""
        for seat in seats:
            gpu = (seat.node, seat.gpu)
            if seat.share:
                self.shared[gpu] = self.shared.get(gpu, 0) + seat.share
            else:
                self.taken[gpu] = run.run_id
        teams = self.in_use.setdefault(run.flavor, {})
        teams[run.team] = teams.get(run.team, 0) + sum(
            s.share / QUARTERS if s.share else 1 for s in seats)
        self.runs_seen.add(run.run_id)
        if own_holds:
            self.holds = [h for h in self.holds
                          if h.plan_id != run.plan_id and h.preemptor_job_id != run.job_id]


async def read(conn: AsyncConnection, runs: Sequence[RunInfo], wanted: Iterable[Gpu],
               now: datetime) -> Book:
    """The rows the proposals of `runs` bear on, in one round trip (the flavors' locks are
    held meanwhile): active allocations on the wanted GPUs, unexpired holds on them or of
    the batch's own plans and jobs, active GPUs per flavor and team, and runs ever seen."""
    a, h = allocations.c, holds.c
    text, integer = sa.Text(), sa.Integer()
    none = sa.cast(sa.null(), text)
    gpus = sorted(set(wanted))
    run_ids = sorted({r.run_id for r in runs})
    job_ids = sorted({r.job_id for r in runs})
    plan_ids = sorted({r.plan_id for r in runs if r.plan_id is not None})
    flavors = sorted({r.flavor for r in runs})
    own = sa.or_(h.preemptor_job_id.in_(job_ids), h.plan_id.in_(plan_ids))
    quarters = sa.case((a.share == 0, QUARTERS), else_=a.share)
    parts = [
        sa.select(sa.literal("taken"), a.node, a.gpu, a.run_id, sa.cast(a.share, text))
        .where(a.released_at.is_(None), sa.tuple_(a.node, a.gpu).in_(gpus)),
        sa.select(sa.literal("held"), h.node, h.gpu, h.plan_id, h.preemptor_job_id)
        .where(h.expires_at > now, sa.or_(sa.tuple_(h.node, h.gpu).in_(gpus), own)),
        sa.select(sa.literal("in_use"), a.team, sa.cast(sa.func.sum(quarters), integer), a.flavor, none)
        .where(a.released_at.is_(None), a.flavor.in_(flavors)).group_by(a.flavor, a.team),
        sa.select(sa.literal("run_seen"), none, sa.cast(sa.null(), integer), a.run_id, none)
        .where(a.run_id.in_(run_ids)).distinct(),
    ]
    book = Book()
    for kind, key, number, ref, preemptor in (await conn.execute(sa.union_all(*parts))).all():
        if kind == "taken" and preemptor != "0":  # a share's row: its quarters of the GPU
            book.shared[(key, number)] = book.shared.get((key, number), 0) + int(preemptor)
        elif kind == "taken":
            book.taken[(key, number)] = ref
        elif kind == "held":
            book.holds.append(Hold(ref, preemptor, (key, number)))
        elif kind == "in_use":
            book.in_use.setdefault(ref, {})[key] = int(number) / QUARTERS
        else:
            book.runs_seen.add(ref)
    return book


async def insert_grants(conn: AsyncConnection, grants: Sequence[tuple[RunInfo, Sequence[Seat]]],
                        granted_at: datetime) -> set[str]:
    """Every grant's claims on its GPUs (`store.claim_seats`: a whole GPU only if none is in
    use, a share only within one GPU), then its seats in one statement, one row per GPU,
    each grant all or none: the run ids whose GPUs turned out to be taken after all (a
    writer that skipped the flavor lock), with nothing of theirs left.

    ON CONFLICT DO NOTHING rather than catching the violation: it waits for a concurrent
    writer's commit like the plain insert would, but never aborts the transaction, so the
    rejection can be written in the same one."""
    claim_failed = await claim_seats(conn, grants)
    grants = [(run, seats) for run, seats in grants if run.run_id not in claim_failed]
    rows = [
        dict(node=s.node, gpu=s.gpu, worker=s.worker, borrowed=s.borrowed,
             run_id=run.run_id, job_id=run.job_id, proposal_id=run.proposal_id,
             plan_id=run.plan_id, team=run.team, user_name=run.user, queue=run.queue,
             flavor=run.flavor, granted_at=granted_at, share=s.share)
        for run, seats in grants for s in seats
    ]
    if not rows:
        return claim_failed
    # In GPU order across the batch, so that two writers racing for the same GPUs wait on
    # each other in one order, never in a deadlock.
    # Chunks go in that order too.
    rows.sort(key=lambda r: (r["node"], r["gpu"]))
    inserted: list[sa.Row[Any]] = []
    for chunk in row_chunks(allocations, rows):
        inserted += (
            await conn.execute(
                insert(allocations)
                .on_conflict_do_nothing(index_elements=["node", "gpu"],
                                        index_where=sa.text("released_at IS NULL AND share = 0"))
                .returning(allocations.c.id, allocations.c.run_id),
                list(chunk),
            )
        ).all()
    got: dict[str, list[int]] = {}
    for row in inserted:
        got.setdefault(row.run_id, []).append(row.id)
    failed = {run.run_id for run, seats in grants if len(got.get(run.run_id, ())) != len(seats)}
    leftovers = [i for run_id in failed for i in got.get(run_id, ())]
    for ids in chunks(leftovers, 1):
        await conn.execute(sa.delete(allocations).where(allocations.c.id.in_(ids)))
    await unclaim(conn, [(s.node, s.gpu, s.share) for run, seats in grants
                         if run.run_id in failed for s in seats])
    return failed | claim_failed


async def add_grant_entries(conn: AsyncConnection,
                            grants: Sequence[tuple[RunInfo, int, int, datetime]]) -> None:
    """One `grant` entry per (run, GPUs, borrowed GPUs, at), in few statements; a run that
    has its entry already keeps it (as `store.add_entry`)."""
    rows = [entry_row("grant", run, gpus, borrowed, 0.0, at, run.proposal_id)
            for run, gpus, borrowed, at in grants]  # fmt: skip
    for chunk in row_chunks(entries, rows):
        await conn.execute(
            insert(entries).on_conflict_do_nothing(constraint="entries_once_per_run"),
            list(chunk),
        )
