"""The ledger's transactions: grant or reject a proposal, release a run, hold GPUs for a plan.

Each handler is one database transaction that starts with its idempotency guard (or a natural
state check), changes the ledger's rows, and queues its events in the outbox. A redelivered
message therefore changes nothing and publishes nothing twice. No NATS here: the service
wires these to its consumers, and tests call them directly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

from opentelemetry.util.types import AttributeValue
from pydantic import BaseModel
from rota.clock import Clock
from rota.config import RotaConfig
from rota.contracts import ContractError, envelope, parse, parse_any
from rota.contracts import messages as m
from rota.contracts.job import share_quarters
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.db.outbox import Outbox
from rota.faults import crash_point
from rota.tracing import job_span
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from rota_ledger import book, store
from rota_ledger.domain import HOLD_TTL_S, Cluster, Code, Decision, Grant, Rejection, Request, decide
from rota_ledger.usage import run_usage

log = logging.getLogger("rota.ledger")

SOURCE = "ledger"
PROPOSALS = "ledger-proposals"
RUNS = "ledger-runs"
PREEMPTIONS = "ledger-preemptions"
HOLDS_GUARD = "ledger-holds"
"""The idempotency guard's consumer name for plans: a plan's holds are made once, ever, so a
redelivered request cannot bring back holds that a grant already cleared."""

RUN_ENDS: dict[type[BaseModel], str] = {m.RunFinished: "finished", m.RunFailed: "failed",
                                        m.RunStopped: "stopped"}
RUN_END_SUBJECTS = frozenset(EVENT_SUBJECTS[kind.__name__] for kind in RUN_ENDS)


def _span_attrs(p: m.AllocationProposed, decision: Decision) -> dict[str, AttributeValue | None]:
    granted = isinstance(decision, Grant)
    return {"rota.run_id": p.run_id, "rota.proposal_id": p.proposal_id, "rota.plan_id": p.plan_id,
            "rota.outcome": "granted" if granted else "rejected", "rota.gpus": p.gpus,
            "rota.flavor": p.flavor, "rota.team": p.team,
            "rota.borrowed_gpus": decision.borrowed_gpus if isinstance(decision, Grant) else None,
            "rota.code": None if isinstance(decision, Grant) else decision.code.value,
            "rota.reason": None if isinstance(decision, Grant) else decision.message[:256]}


class Ledger:
    def __init__(
        self, engine: Callable[[], AsyncEngine], outbox: Outbox, config: RotaConfig, clock: Clock,
        *, max_bytes: int, on_commit: Callable[[], None] = lambda: None,
    ) -> None:
        self._engine = engine
        self._outbox = outbox
        self._cluster = Cluster.from_config(config)
        self._half_life_s = config.policy.fairshare_half_life_s
        self._clock = clock
        self._max_bytes = max_bytes
        self._on_commit = on_commit

    async def _emit(self, conn: AsyncConnection, event: BaseModel, at: datetime, *,
                    job_id: str | None = None, run_id: str | None = None) -> None:
        env = envelope(event, source=SOURCE, job_id=job_id, run_id=run_id, occurred_at=at)
        await self._outbox.add(conn, env, EVENT_SUBJECTS[env.type], stream=STREAM_EVT)

    def _committed(self) -> None:
        crash_point("after_commit:ledger")
        self._on_commit()

    # ------------------------------------------------------------------ grant

    async def propose(self, raw: bytes) -> Decision | None:
        """AllocationProposed → AllocationGranted or AllocationRejected, once per proposal_id.
        None: a proposal already decided, or one too broken to answer."""
        return (await self.propose_batch([raw]))[0]

    async def propose_batch(self, raws: list[bytes]) -> list[Decision | None]:
        """Decide proposals in order, in one transaction: each sees the GPUs the ones before
        it took. One commit per batch is what lets the ledger keep up with the scheduler."""
        proposals: list[m.AllocationProposed | None] = []
        for raw in raws:
            try:
                proposals.append(parse(raw, m.AllocationProposed, max_bytes=self._max_bytes).data)
            except ContractError as exc:
                log.warning("skipping an unreadable proposal: %s", exc)
                proposals.append(None)
        async with self._engine().begin() as conn:
            decisions = await self._decide_batch(conn, proposals, self._clock.now())
        self._committed()
        for p, decision in zip(proposals, decisions, strict=True):
            if p is None or decision is None:
                continue
            if isinstance(decision, Grant):
                log.info("granted %s %s GPUs (%s borrowed) to run %s of %s/%s", p.gpus,
                         p.flavor, decision.borrowed_gpus, p.run_id, p.team, p.user)
            else:
                log.info("rejected proposal %s (run %s): %s %s", p.proposal_id, p.run_id,
                         decision.code, decision.message)
        return decisions

    async def _decide_batch(
        self, conn: AsyncConnection, proposals: list[m.AllocationProposed | None], now: datetime
    ) -> list[Decision | None]:
        """A fixed number of statements however many proposals: the guard, the flavors'
        locks, one read (`book.read`), then one insert each for seats, entries and events.
        Each proposal is decided on the rows as the ones before it left them (`Book`)."""
        decisions: list[Decision | None] = [None] * len(proposals)
        fresh = await self._outbox.first_times(
            conn, PROPOSALS, [p.proposal_id for p in proposals if p is not None])
        todo: list[tuple[int, m.AllocationProposed, Request, store.RunInfo]] = []
        for i, p in enumerate(proposals):
            if p is None:
                continue
            if p.proposal_id not in fresh:  # decided before, or earlier in this batch
                log.info("proposal %s decided already; ignoring the copy", p.proposal_id)
                continue
            fresh.discard(p.proposal_id)
            request = Request(team=p.team, flavor=p.flavor, gpus=p.gpus, plan_id=p.plan_id,
                              workers=[(w.worker, w.node, w.gpus) for w in p.placement],
                              share=max(share_quarters(w.gpu_share) for w in p.placement))
            todo.append((i, p, request, store.RunInfo(
                p.run_id, p.job_id, p.proposal_id, p.plan_id, p.team, p.user, p.queue.value,
                p.flavor)))
        if not todo:
            return decisions
        # In name order, so two transactions locking several flavors never deadlock.
        for flavor in sorted({p.flavor for _, p, _, _ in todo}):
            await store.lock_flavor(conn, flavor)
        ledger_book = await book.read(conn, [run for *_, run in todo],
                                      (g for _, _, request, _ in todo for g in request.wanted), now)
        granted: list[tuple[store.RunInfo, Grant, bool]] = []
        for i, _, request, run in todo:
            snapshot, own_holds = ledger_book.snapshot(run, request.wanted)
            decision = decide(request, snapshot, self._cluster)
            if isinstance(decision, Grant):
                ledger_book.grant(run, decision.seats, own_holds)
                granted.append((run, decision, own_holds))
            decisions[i] = decision
        # A grant the database refuses (a writer that skipped the flavor lock) becomes a
        # rejection; proposals after it were decided as if it stood, which can only have
        # turned away GPUs, never given one twice.
        refused = await book.insert_grants(conn, [(run, g.seats) for run, g, _ in granted], now)
        for i, _, _, run in todo:
            if run.run_id in refused and isinstance(decisions[i], Grant):
                decisions[i] = Rejection(Code.GPU_TAKEN, "a GPU of the placement was allocated"
                                                         " concurrently (the database refused a"
                                                         " double booking)")
        kept = [(run, g, own) for run, g, own in granted if run.run_id not in refused]
        await book.add_grant_entries(conn, [(run, len(g.seats), g.borrowed_gpus, now)
                                            for run, g, _ in kept])
        for run, _, own_holds in kept:
            if own_holds:  # the preemptor has its GPUs: the rest of its holds are free
                await store.clear_holds(conn, run.plan_id, preemptor_job_id=run.job_id)
        events = []
        for i, p, _, _ in todo:
            verdict = decisions[i]
            assert verdict is not None
            events.append(self._verdict(p, verdict, now))
        await self._outbox.add_rows(conn, events)
        return decisions

    def _verdict(self, p: m.AllocationProposed, decision: Decision, now: datetime) -> dict[str, Any]:
        """The outbox row of a proposal's answer, built inside its span (the trace it carries)."""
        event: BaseModel
        if isinstance(decision, Grant):
            name = "rota.ledger.granted"
            event = m.AllocationGranted(
                proposal_id=p.proposal_id, job_id=p.job_id, run_id=p.run_id, team=p.team,
                flavor=p.flavor, placement=p.placement, gpus=p.gpus,
                borrowed_gpus=decision.borrowed_gpus)
        else:
            name = "rota.ledger.rejected"
            event = m.AllocationRejected(
                proposal_id=p.proposal_id, job_id=p.job_id, run_id=p.run_id,
                code=decision.code.value, message=decision.message[:1024])
        with job_span(name, p.job_id, _span_attrs(p, decision)):
            env = envelope(event, source=SOURCE, job_id=p.job_id, run_id=p.run_id, occurred_at=now)
            return self._outbox.row(env, EVENT_SUBJECTS[env.type], stream=STREAM_EVT)

    # ------------------------------------------------------------------ release

    async def run_ended(self, raw: bytes) -> store.Released | None:
        """RunFinished / RunFailed / RunStopped → release the run's GPUs, append the entry,
        add its decayed usage, and publish AllocationReleased + UsageRecorded.

        Idempotent by state: a run with no active rows (unknown, or released before) is left
        alone, so duplicates and the second of Stopped-then-Finished change nothing."""
        try:
            env = parse_any(raw, max_bytes=self._max_bytes)
        except ContractError as exc:
            log.warning("skipping an unreadable run event: %s", exc)
            return None
        data = env.data
        reason = RUN_ENDS.get(type(data))
        if reason is None or not isinstance(data, m.RunFinished | m.RunFailed | m.RunStopped):
            return None
        if isinstance(data, m.RunStopped):
            reason = f"stopped:{data.reason.value}"
        # The run ended when its executor says, but never later than now: a skewed clock
        # must not book GPU-seconds that have not happened.
        at = min(env.occurred_at, self._clock.now())
        async with self._engine().begin() as conn:
            released = await store.release_run(conn, data.run_id, at, reason)
            if released is None:
                log.info("%s for run %s: nothing to release", env.type, data.run_id)
                return None
            await self._book_release(conn, released, env.id)
        self._committed()
        log.info("released %s %s GPUs of run %s (%s)", released.gpus, released.run.flavor,
                 released.run.run_id, reason)
        return released

    async def _book_release(self, conn: AsyncConnection, released: store.Released,
                            cause_id: str) -> None:
        run, at = released.run, released.released_at
        duration_s = max(0.0, (at - released.granted_at).total_seconds())
        gpu_seconds = released.gpu_demand * duration_s
        await store.add_entry(conn, kind="release", run=run, gpus=-released.gpus,
                              borrowed_gpus=-released.borrowed_gpus, gpu_seconds=gpu_seconds,
                              at=at, cause_id=cause_id)
        decayed = run_usage(released.gpu_demand, duration_s, self._half_life_s)
        await store.add_usage(conn, run.team, store.TEAM_TOTAL, decayed, at, self._half_life_s)
        await store.add_usage(conn, run.team, run.user, decayed, at, self._half_life_s)
        await self._emit(conn, m.AllocationReleased(
            job_id=run.job_id, run_id=run.run_id, team=run.team, flavor=run.flavor,
            gpus=released.gpus, gpu_seconds=gpu_seconds,
        ), at, job_id=run.job_id, run_id=run.run_id)
        teams: dict[str, float] = {}
        users: dict[str, float] = {}
        for team, user, value in await store.usage_rows(conn, team=run.team):
            decayed_now = value.decayed_to(at, self._half_life_s)
            if user == store.TEAM_TOTAL:
                teams[team] = decayed_now
            else:
                users[f"{team}/{user}"] = decayed_now
        # Every team (a full snapshot for fair share); users of the released run's team only,
        # so the message stays small however many users the cluster has.
        await self._emit(conn, m.UsageRecorded(
            as_of=at, half_life_s=self._half_life_s, teams=teams, users=users,
        ), at)

    # ------------------------------------------------------------------ holds

    async def preemption(self, raw: bytes) -> int:
        """PreemptionRequested → hold the victims' GPUs (and the plan's target, when given) for
        the plan; PreemptionCompleted(aborted) → drop them. Returns the holds added or removed."""
        try:
            env = parse_any(raw, max_bytes=self._max_bytes)
        except ContractError as exc:
            log.warning("skipping an unreadable preemption event: %s", exc)
            return 0
        data: Any = env.data
        now = self._clock.now()
        if isinstance(data, m.PreemptionCompleted):
            if not data.aborted:
                return 0  # the holds wait for the preemptor's grant (or their expiry)
            async with self._engine().begin() as conn:
                cleared = await store.clear_holds(conn, data.plan_id)
            log.info("plan %s aborted: %s held GPUs freed", data.plan_id, cleared)
            return cleared
        if not isinstance(data, m.PreemptionRequested):
            return 0
        if data.node is not None:
            return 0  # a drain's plan (DECISIONS 100): no preemptor waits for these GPUs
        async with self._engine().begin() as conn:
            if not await self._outbox.first_time(conn, HOLDS_GUARD, data.plan_id):
                return 0
            await store.prune_holds(conn, now)
            if await store.plan_granted(conn, data.plan_id):
                return 0  # the preemptor got its GPUs before this request was read
            # A shrunk victim keeps its first workers' GPUs to restart on: only its dropped
            # ones, which are in the target, are the preemptor's (DECISIONS 81).
            victims = [v.run_id for v in data.victims if not v.shrink_to]
            held: dict[tuple[str, int], str | None] = {
                gpu: run_id for run_id, gpu in await store.active_gpus_of_runs(conn, victims)
            }
            # `target` (where the preemptor will go) is newer than some producers: optional.
            for worker in getattr(data, "target", None) or []:
                for gpu in worker.gpus:
                    held.setdefault((worker.node, gpu), None)
            added = await store.add_holds(
                conn, plan_id=data.plan_id, preemptor_job_id=data.preemptor_job_id,
                gpus=held.items(), created_at=min(env.occurred_at, now), ttl_s=HOLD_TTL_S,
            )
        log.info("plan %s: %s GPUs held for preemptor %s", data.plan_id, added,
                 data.preemptor_job_id)
        return added
