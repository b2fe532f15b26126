"""Submit and cancel: parse, check, write the job and its event in one transaction, reply.

The same code serves the JetStream commands (`rota.cmd.*.<team>`) and the request/reply
twins (`rota.api.submit[.<team>]`, `rota.api.cancel.<team>`), so both paths obey one rulebook.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, cast

from pydantic import BaseModel
from rota.bus.broker import publish
from rota.config import RotaConfig
from rota.contracts import ContractError, envelope, parse
from rota.contracts import messages as m
from rota.contracts.job import TERMINAL_STATES
from rota.contracts.subjects import API_SUBMIT, EVENT_SUBJECTS, STREAM_EVT, SUBMIT_PREFIX
from rota.faults import crash_point
from rota.ids import derived_id, new_id
from rota.service import RotaService
from rota.tracing import start_job_trace
from sqlalchemy.ext.asyncio import AsyncConnection

from rota_submission import intake, store
from rota_submission.domain import Rejection, check_size, check_submission, spec_hash
from rota_submission.producer import command_ids, current_trace_headers, producer_span

log = logging.getLogger("rota.submission")

C = TypeVar("C", bound=BaseModel)

SOURCE = "submission"


@dataclass(frozen=True)
class Origin:
    """Where a command came from. `seed` and `at` are stable across redeliveries."""

    subject: str
    seed: str
    at: datetime
    headers: Mapping[str, str] = field(default_factory=dict)
    """The command's NATS headers: its `Nats-Msg-Id` and the producer's trace context."""

    @property
    def team(self) -> str | None:
        """The team the subject is scoped to (`rota.cmd.submit.<team>`, `rota.api.cancel.<team>`
        ...), None for the unscoped `rota.api.submit`. All that follows the command's three
        tokens counts, never just the last token: `rota.api.cancel.ml.nlp` speaks for the
        no-team `ml.nlp`, so it may act for no team, `nlp` included."""
        if self.subject == API_SUBMIT:
            return None
        parts = self.subject.split(".", 3)
        return parts[3] if len(parts) == 4 else ""


@dataclass(frozen=True)
class Command:
    """One command as its answers name it: the envelope id and submission id it came with
    (each None when unreadable), and where it came from."""

    origin: Origin
    id: str | None
    submission_id: str | None


class Rejected(Exception):
    def __init__(self, rejection: Rejection) -> None:
        super().__init__(rejection.message)
        self.rejection = rejection


class Commands:
    def __init__(self, service: RotaService, config: RotaConfig) -> None:
        self.service = service
        self.config = config

    def command(self, raw: bytes, origin: Origin) -> Command:
        command_id, submission_id = command_ids(
            raw, origin.headers, max_bytes=self.service.settings.max_message_bytes,
            submit=origin.subject.startswith((SUBMIT_PREFIX, API_SUBMIT)))
        return Command(origin, command_id, submission_id)

    async def reject(
        self, rejection: Rejection, command: Command, *, team: str | None = None,
        job_id: str | None = None,
    ) -> m.ApiReply:
        """Publish `JobRejected` (nothing is stored) and build the error reply. `team` is the
        sender's (the subject's, when it names one): the rejection goes on that team's feed,
        never on the feed of a team it tried to submit for.

        Its id derives from the command's stable seed, so a redelivered bad command is
        rejected again under the same `Nats-Msg-Id` and JetStream keeps one copy.
        """
        origin = command.origin
        event = m.JobRejected(
            code=rejection.code, field=rejection.field, message=rejection.message,
            submission_id=command.submission_id, team=team, job_id=job_id,
            subject=origin.subject, command_id=command.id,
        )
        env = envelope(
            event, source=SOURCE, id=derived_id(f"rejected:{origin.seed}", origin.at),
            occurred_at=origin.at, job_id=job_id,
        )
        with producer_span(origin.headers, origin.subject):
            await publish(self.service.broker, env, EVENT_SUBJECTS["JobRejected"],
                          stream=STREAM_EVT, extra_headers=current_trace_headers())
        log.info("rejected %s: %s %s", origin.subject, rejection.code, rejection.message)
        return m.ApiReply(
            ok=False,
            error=m.ApiError(code=rejection.code, field=rejection.field, message=rejection.message),
            command_id=command.id, submission_id=command.submission_id,
        )

    def _parse(self, raw: bytes, model: type[C]) -> C:
        try:
            return parse(raw, model, max_bytes=self.service.settings.max_message_bytes).data
        except ContractError as exc:
            raise Rejected(Rejection(exc.code, exc.field, exc.message)) from None

    async def submit(self, raw: bytes, origin: Origin) -> m.ApiReply:
        command = self.command(raw, origin)
        try:
            spec = self._parse(raw, m.SubmitJob)
        except Rejected as exc:
            return await self.reject(exc.rejection, command, team=origin.team)
        try:
            if (rejection := self._check(spec, origin)) is not None:
                raise Rejected(rejection)
            reply = await self._record(spec, command)
        except Rejected as exc:
            return await self.reject(exc.rejection, command, team=origin.team or spec.team)
        return m.ApiReply(ok=True, result=reply.model_dump(mode="json"), command_id=command.id,
                          submission_id=spec.submission_id)

    async def submit_batch(self, items: list[tuple[bytes, Origin]]) -> None:
        """Many SubmitJob commands, the valid ones recorded in one transaction.

        The JetStream path's throughput comes from here: one commit per pull batch instead
        of one per job. Each command is still decided on its own, exactly as `submit` would.
        """
        accepted: list[tuple[m.SubmitJob, Command]] = []
        refused: list[tuple[Rejection, Command, str | None]] = []
        for raw, origin in items:
            command = self.command(raw, origin)
            try:
                spec = self._parse(raw, m.SubmitJob)
            except Rejected as exc:
                refused.append((exc.rejection, command, origin.team))
                continue
            if (rejection := self._check(spec, origin)) is not None:
                refused.append((rejection, command, origin.team or spec.team))
            else:
                accepted.append((spec, command))
        if accepted:
            now = self.service.clock.now()
            async with self.service.engine.begin() as conn:
                outcomes = await self._insert_many(conn, accepted, now)
            crash_point("after_commit:submission")
            self._wake_relay()
            for (spec, command), outcome in zip(accepted, outcomes, strict=True):
                if isinstance(outcome, Rejection):  # decided before anything of it was written
                    refused.append((outcome, command, command.origin.team or spec.team))
        # Side by side: each waits for its JetStream ack, and a flood refused one by one
        # answered no faster than one round trip a command.
        await asyncio.gather(*(self.reject(rejection, command, team=team)
                               for rejection, command, team in refused))

    def _check(self, spec: m.SubmitJob, origin: Origin) -> Rejection | None:
        return check_submission(spec, origin.team, self.config) or check_size(
            spec, self.config, self.service.settings.max_message_bytes)

    async def _record(self, spec: m.SubmitJob, command: Command) -> m.SubmitReply:
        now = self.service.clock.now()
        async with self.service.engine.begin() as conn:
            (outcome,) = await self._insert_many(conn, [(spec, command)], now)
            if isinstance(outcome, Rejection):
                raise Rejected(outcome)
        crash_point("after_commit:submission")
        self._wake_relay()
        return outcome

    async def _insert_many(
        self, conn: AsyncConnection, commands: list[tuple[m.SubmitJob, Command]], now: datetime
    ) -> list[m.SubmitReply | Rejection]:
        """Record jobs and their JobSubmitted in the caller's transaction: one statement for
        the jobs, one for the duplicates' records, one for the events, however many jobs.
        Each spec is decided as if inserted alone, in order; a Rejection (its team's intake
        limits, a reused submission id) writes nothing, and a duplicate writes only its
        answer, `JobResubmitted`."""
        refused = await self._over_limits(conn, [spec for spec, _ in commands], now)
        over = {position for position, _ in refused}
        commands = [item for i, item in enumerate(commands) if i not in over]
        specs = [spec for spec, _ in commands]
        digests = [spec_hash(spec) for spec in specs]
        job_ids = [new_id() for _ in specs]
        inserted = await store.insert_jobs(conn, [
            store.job_row(job_id, spec, digest, now)
            for job_id, spec, digest in zip(job_ids, specs, digests, strict=True)
        ])
        existing = await store.jobs_by_submission(conn, {
            (spec.team, spec.submission_id)
            for job_id, spec in zip(job_ids, specs, strict=True) if job_id not in inserted
        })
        outcomes: list[m.SubmitReply | Rejection] = []
        events: list[dict[str, Any]] = []
        for job_id, (spec, command), digest in zip(job_ids, commands, digests, strict=True):
            if job_id not in inserted:
                outcome = self._duplicate(spec, digest, existing[(spec.team, spec.submission_id)])
                if isinstance(outcome, m.SubmitReply):
                    events.append(self._resubmitted(outcome, spec, command, now))
                outcomes.append(outcome)
                continue
            event = m.JobSubmitted(job_id=job_id, spec=spec, submitted_at=now,
                                   command_id=command.id, submission_id=spec.submission_id)
            # The root of the job's one trace: JobSubmitted carries it, and so, from there,
            # does every message about the job. It links to the producer's span.
            origin = command.origin
            with producer_span(origin.headers, origin.subject), start_job_trace(
                    "rota.job.submit", job_id, {
                "rota.team": spec.team, "rota.user": spec.user, "rota.queue": spec.queue.value,
                "rota.flavor": spec.flavor, "rota.gpus": spec.total_gpus,
                "rota.job_name": spec.name, "rota.submission_id": spec.submission_id,
            }):
                events.append(self.service.outbox.row(
                    envelope(event, source=SOURCE, job_id=job_id, occurred_at=now),
                    EVENT_SUBJECTS["JobSubmitted"], stream=STREAM_EVT,
                ))
            log.info("job %s submitted by %s/%s (%s)", job_id, spec.team, spec.user, spec.name)
            outcomes.append(m.SubmitReply(job_id=job_id, duplicate=False, state="pending",
                                          submission_id=spec.submission_id))
        await self.service.outbox.add_rows(conn, events)
        for position, rejection in refused:  # back in the callers' order
            outcomes.insert(position, rejection)
        return outcomes

    async def _over_limits(self, conn: AsyncConnection, specs: list[m.SubmitJob],
                           now: datetime) -> list[tuple[int, Rejection]]:
        """The new jobs that a team's intake limits refuse (`rota_submission.intake`), by
        position, in order. A submission id already recorded, or earlier in `specs`, is a
        resubmission: it passes, to be answered with its job."""
        keys = [(spec.team, spec.submission_id) for spec in specs]
        recorded = await store.jobs_by_submission(conn, set(keys))
        gates = await intake.open_gates(
            conn, {team for team, sid in keys if (team, sid) not in recorded}, self.config, now)
        refused: list[tuple[int, Rejection]] = []
        seen: set[tuple[str, str]] = set(recorded)
        for position, key in enumerate(keys):
            if key in seen:
                continue
            if (rejection := gates[key[0]].admit()) is not None:
                refused.append((position, rejection))
                continue
            seen.add(key)
        await intake.close_gates(conn, gates, now)
        return refused

    def _resubmitted(self, reply: m.SubmitReply, spec: m.SubmitJob, command: Command,
                     now: datetime) -> dict[str, Any]:
        """The answer to a duplicate, on the stream as well as in the reply. Its id derives
        from the command's stable seed, so a redelivered duplicate is answered once."""
        origin = command.origin
        event = m.JobResubmitted(job_id=reply.job_id, team=spec.team,
                                 submission_id=spec.submission_id, command_id=command.id,
                                 state=cast("m.JobStateName", reply.state), subject=origin.subject)
        with producer_span(origin.headers, origin.subject):
            return self.service.outbox.row(
                envelope(event, source=SOURCE, job_id=reply.job_id, occurred_at=now,
                         id=derived_id(f"resubmitted:{origin.seed}", origin.at)),
                EVENT_SUBJECTS["JobResubmitted"], stream=STREAM_EVT,
            )

    @staticmethod
    def _duplicate(spec: m.SubmitJob, digest: str, existing: Any) -> m.SubmitReply | Rejection:
        """The answer to a submission_id that already names a job: that job, if same spec."""
        if existing.spec_hash != digest:
            return Rejection(
                "SUBMISSION_ID_REUSED", "submission_id",
                f"submission_id {spec.submission_id!r} already names job"
                f" {existing.job_id} with a different spec",
            )
        log.info("duplicate submission %s/%s: job %s", spec.team, spec.submission_id,
                 existing.job_id)
        return m.SubmitReply(job_id=existing.job_id, duplicate=True,
                             state=existing.state, submission_id=spec.submission_id)

    async def cancel(self, raw: bytes, origin: Origin) -> m.ApiReply:
        answered = self.command(raw, origin)
        try:
            command = self._parse(raw, m.CancelJob)
        except Rejected as exc:
            return await self.reject(exc.rejection, answered, team=origin.team)
        try:
            if origin.team is not None and origin.team != command.team:
                raise Rejected(Rejection(
                    "UNAUTHORISED", "team",
                    f"a producer for team {origin.team!r} may not cancel for {command.team!r}",
                ))
            with producer_span(origin.headers, origin.subject):
                state = await self._cancel(command, answered.id)
        except Rejected as exc:
            return await self.reject(exc.rejection, answered, team=origin.team,
                                     job_id=command.job_id)
        return m.ApiReply(ok=True, result={"job_id": command.job_id, "state": state},
                          command_id=answered.id)

    async def _cancel(self, command: m.CancelJob, command_id: str | None) -> str:
        now = self.service.clock.now()
        async with self.service.engine.begin() as conn:
            row = await store.lock_job(conn, command.job_id)
            if row is None or row.team != command.team:
                # Another team's job is no job, as the queries answer: any other answer
                # would let a team probe which job ids exist.
                raise Rejected(Rejection("JOB_NOT_FOUND", "job_id",
                                         f"no job {command.job_id}"))
            if row.state in TERMINAL_STATES:
                return str(row.state)  # cancelling twice is not an error, and emits nothing
            await store.update_job(conn, command.job_id,
                                   {"state": "cancelled", "updated_at": now, "ended_at": now,
                                    "detail": command.reason})
            event = m.JobCancelled(job_id=command.job_id, team=command.team,
                                   reason=command.reason, command_id=command_id,
                                   was_running=row.state in ("admitted", "running", "preempting"))
            await self.service.outbox.add(
                conn, envelope(event, source=SOURCE, job_id=command.job_id, occurred_at=now),
                EVENT_SUBJECTS["JobCancelled"], stream=STREAM_EVT,
            )
        crash_point("after_commit:submission")
        self._wake_relay()
        return "cancelled"

    def _wake_relay(self) -> None:
        if self.service.relay is not None:
            self.service.relay.wake()
