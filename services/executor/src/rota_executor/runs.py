"""The executor's bookkeeping: every change to a run and the event reporting it, in one transaction.

Handlers (`app.py`) call `start_batch` (a pull batch of StartRuns in one transaction), `stop`,
`report_checkpoint` and `notice_seen`; backends call back through the `Reporter` methods
`launched`, `checkpointed` and `ended`. Idempotency comes from natural state checks on the
locked row: a run is inserted once (duplicate `StartRun`, in its batch or a redelivered one),
ends once (`ended` on a run already over does nothing), and is stopped once.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import signal
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from opentelemetry.context import Context
from opentelemetry.util.types import AttributeValue
from pydantic import BaseModel
from rota.bus.query import answer_query, api_error
from rota.config.model import Node
from rota.contracts import ContractError, envelope, parse
from rota.contracts import messages as m
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.faults import crash_point
from rota.ids import derived_id, new_id
from rota.service import RotaService
from rota.tracing import context_from_headers, job_span
from sqlalchemy.ext.asyncio import AsyncConnection

from rota_executor import metrics, procs, store
from rota_executor.backend import Backend, Checkpoint, Exit, RunRecord, WorkerProcess
from rota_executor.domain import mint_token, outcome, placement_problem, token_sha256

log = logging.getLogger("rota.executor")

SOURCE = "executor"


def _event_attrs(event: BaseModel, run: RunRecord | m.StartRun) -> dict[str, AttributeValue | None]:
    data = event.model_dump(mode="json")
    attrs: dict[str, AttributeValue | None] = {"rota.run_id": run.run_id, "rota.source": SOURCE}
    for key in ("attempt", "reason", "forced", "checkpoint_uri", "notice_id", "exit_code",
                "error", "lost_gpu_seconds", "resumed_from"):
        value = data.get(key)
        if isinstance(value, str | int | float | bool):
            attrs[f"rota.{key}"] = value
    return attrs


class Executor:
    def __init__(self, service: RotaService, nodes: list[Node]) -> None:
        self.service = service
        self.nodes = nodes
        self._nodes_by_name = {node.name: node for node in nodes}
        self.backend: Backend | None = None
        self.instance = new_id()
        """This process, in its announcements: a restart is a new instance."""

    @property
    def _backend(self) -> Backend:
        if self.backend is None:
            raise RuntimeError("executor: no backend yet")
        return self.backend

    def _parse(self, raw: bytes, model: type[Any]) -> Any:
        try:
            return parse(raw, model, max_bytes=self.service.settings.max_message_bytes)
        except ContractError as exc:
            log.error("dropped a malformed %s: %s", model.__name__, exc)
            return None

    async def _emit(self, conn: AsyncConnection, event: BaseModel, run: RunRecord | m.StartRun,
                    *, at: datetime, id: str | None = None) -> None:
        await self.service.outbox.add_rows(conn, [self._event_row(event, run, at=at, id=id)])

    def _event_row(self, event: BaseModel, run: RunRecord | m.StartRun, *, at: datetime,
                   id: str | None = None, parent: Context | None = None) -> dict[str, Any]:
        env = envelope(event, source=SOURCE, job_id=run.job_id, run_id=run.run_id,
                       occurred_at=at, id=id)
        # Each run event is a span in the job's trace, also when a backend's timer (a
        # simulated checkpoint, a process exit) rather than a message caused it.
        with job_span(f"rota.executor.{env.type}", run.job_id, _event_attrs(event, run),
                      parent=parent):
            return self.service.outbox.row(env, EVENT_SUBJECTS[env.type], stream=STREAM_EVT)

    def _wake(self) -> None:
        if self.service.relay is not None:
            self.service.relay.wake()

    # ------------------------------------------------------------------ handlers

    async def start_batch(self, commands: list[tuple[bytes, Mapping[str, str] | None]]) -> None:
        """StartRun commands (message and headers) of a pull batch: each run recorded with its
        `RunStarted` (or `RunFailed` if it cannot run here) once, all in one transaction, and
        only then launched. A run recorded already (a redelivery, a copy earlier in the batch)
        does nothing again; a malformed command is dropped with its reason."""
        backend, now = self._backend, self.service.clock.now()
        wanted: dict[str, tuple[m.StartRun, str | None, Context | None]] = {}
        for raw, headers in commands:
            env = self._parse(raw, m.StartRun)
            if env is None:
                continue
            start: m.StartRun = env.data
            if start.run_id in wanted:
                log.info("duplicate StartRun for run %s: it starts once", start.run_id)
                continue
            problem = (placement_problem(list(start.placement), self._nodes_by_name)
                       or backend.unsupported(start.spec))
            wanted[start.run_id] = (start, problem, context_from_headers(headers))
        if not wanted:
            return
        # Minted here, kept only as its hash, and handed to the run alone: it is on no stream.
        tokens = {run_id: mint_token() for run_id in wanted}
        async with self.service.engine.begin() as conn:
            inserted = await store.insert_runs(conn, [store.run_row(
                start, token_sha256=tokens[run_id][1], backend=backend.name,
                state="failed" if problem else "running", now=now, detail=problem,
            ) for run_id, (start, problem, _) in wanted.items()])
            await self.service.outbox.add_rows(conn, [
                self._event_row(self._start_event(start, problem), start, at=now, parent=parent)
                for run_id, (start, problem, parent) in wanted.items() if run_id in inserted])
        self._wake()
        launches: list[tuple[RunRecord, str]] = []
        for run_id, (start, problem, _) in wanted.items():
            if run_id not in inserted:
                log.info("duplicate StartRun for run %s: it starts once", run_id)
            elif problem:
                metrics.could_not_start()
                log.warning("run %s of job %s cannot start: %s", run_id, start.job_id, problem)
            else:
                launches.append((store.new_record(start, backend=backend.name, now=now),
                                 tokens[run_id][0]))
        if launches:
            crash_point("after_commit:executor")
        await self._launch_all(launches)

    @staticmethod
    def _start_event(start: m.StartRun, problem: str | None) -> m.RunStarted | m.RunFailed:
        if problem:
            return m.RunFailed(run_id=start.run_id, job_id=start.job_id, error=problem)
        return m.RunStarted(run_id=start.run_id, job_id=start.job_id, attempt=start.attempt,
                            placement=start.placement, resumed_from=start.resume_from)

    async def _launch_all(self, launches: list[tuple[RunRecord, str]]) -> None:
        """Launch every recorded run, each even when one before it failed: a redelivery
        would find them all recorded and launch none. A run the backend cannot start ends
        failed; if even that cannot be recorded, the first such error is raised at the end."""
        backend = self._backend
        unrecorded: list[Exception] = []
        for run, run_token in launches:
            log.info("run %s of job %s (attempt %d) starting on %s%s", run.run_id, run.job_id,
                     run.attempt, backend.name,
                     f", resuming from {run.resume_from}" if run.resume_from else "")
            try:
                await backend.start(run, run_token)
            except Exception as exc:
                log.exception("run %s: the %s backend could not start it", run.run_id,
                              backend.name)
                try:
                    await self.ended(run.run_id, Exit(None, f"cannot start: {exc}"))
                except Exception as not_recorded:
                    unrecorded.append(not_recorded)
        if unrecorded:
            raise unrecorded[0]

    async def stop(self, raw: bytes) -> None:
        """StopRun: record the stop once, then have the backend stop the run. Stopping an
        unknown run, or one already over, only logs; one already stopping is stopped again."""
        env = self._parse(raw, m.StopRun)
        if env is None:
            return
        stop: m.StopRun = env.data
        now = self.service.clock.now()
        async with self.service.engine.begin() as conn:
            row = await store.lock(conn, stop.run_id)
            if row is None:
                log.info("StopRun for unknown run %s: nothing to stop", stop.run_id)
                return
            if row.state not in store.LIVE_STATES:
                log.info("StopRun for run %s: it is %s already; nothing to do", stop.run_id,
                         row.state)
                return
            if row.state == "stopping":
                # A redelivery: the first attempt may have failed before the run's end was
                # recorded. Stopping again is harmless (signals are not re-sent).
                log.info("StopRun for run %s: stopping already; making sure", stop.run_id)
            else:
                await store.update(conn, stop.run_id, {
                    "state": "stopping", "stop_reason": stop.reason.value,
                    "stop_forced": stop.forced, "stop_requested_at": now, "updated_at": now,
                })
            run = await store.get(conn, stop.run_id)
        assert run is not None
        log.info("stopping run %s (%s%s)", run.run_id, stop.reason.value,
                 ", forced" if stop.forced else "")
        await self._backend.stop(run)

    async def report_checkpoint(self, raw: bytes) -> bytes:
        """A run's `ReportCheckpoint` request: with its own token, its checkpoint is recorded
        and published as `RunCheckpointed` (without the token) in one transaction, and only
        then answered, so a job that has its answer knows its acknowledgement counts."""
        return await answer_query(raw, m.ReportCheckpoint, self._checkpoint_reported,
                                  source=SOURCE, max_bytes=self.service.settings.max_message_bytes)

    async def _checkpoint_reported(self, report: m.ReportCheckpoint) -> m.ApiReply:
        now = self.service.clock.now()
        async with self.service.engine.begin() as conn:
            row = await store.lock(conn, report.run_id)
            # The same answer for a wrong token and an unknown run: neither tells a prober
            # which runs exist.
            if row is None or not hmac.compare_digest(token_sha256(report.run_token),
                                                      row.token_sha256):
                metrics.checkpoint_refused()
                log.warning("checkpoint %s for run %s refused: wrong run token",
                            report.checkpoint_uri, report.run_id)
                return api_error("UNAUTHORISED", "not this run's token", "run_token")
            if row.job_id != report.job_id:
                return api_error("INVALID_FIELD", f"run {report.run_id} is not of job "
                                 f"{report.job_id}", "job_id")
            if row.state not in store.LIVE_STATES:
                return api_error("RUN_OVER", f"run {report.run_id} is {row.state}: a late "
                                 "checkpoint changes nothing", "run_id")
            # The job's clock is not ours: the checkpoint counts from when it reached us.
            values = self._checkpoint_values(row, report.checkpoint_uri, now, report.progress_s,
                                             report.notice_id)
            if not values:
                return m.ApiReply(ok=True, result={"recorded": False})  # a repeat
            await store.update(conn, report.run_id, values)
            run = await store.get(conn, report.run_id)
            assert run is not None
            await self._emit_checkpointed(conn, run, Checkpoint(
                report.checkpoint_uri, now, report.progress_s, report.notice_id))
        self._wake()
        if report.notice_id is not None:
            log.info("run %s acknowledged notice %s with %s", run.run_id, report.notice_id,
                     report.checkpoint_uri)
            self._backend.noticed(run)
        return m.ApiReply(ok=True, result={"recorded": True})

    async def _emit_checkpointed(self, conn: AsyncConnection, run: RunRecord,
                                 checkpoint: Checkpoint) -> None:
        event = m.RunCheckpointed(
            run_id=run.run_id, job_id=run.job_id, checkpoint_uri=checkpoint.uri,
            notice_id=checkpoint.notice_id, progress_s=checkpoint.progress_s)
        # Derived from what it reports, so a repeat after a restart is dropped by JetStream.
        seed = f"checkpointed:{run.run_id}:{checkpoint.uri}:{checkpoint.notice_id}"
        await self._emit(conn, event, run, at=checkpoint.at, id=derived_id(seed, checkpoint.at))

    @staticmethod
    def _checkpoint_values(row: Any, uri: str, at: datetime, progress_s: float | None,
                           notice_id: str | None) -> dict[str, Any]:
        values: dict[str, Any] = {}
        if row.notice_acked_at is not None:
            # The acknowledged checkpoint is what the next run resumes from; a later report
            # (a second worker's ack, a periodic save) must not move it.
            return values
        if row.last_checkpoint_at is None or at >= row.last_checkpoint_at:
            values.update(last_checkpoint_uri=uri, last_checkpoint_at=at,
                          last_checkpoint_progress_s=progress_s)
        if notice_id is not None and row.notice_acked_at is None:
            values.update(notice_acked_at=at)
        if values:
            values["updated_at"] = at
        return values

    async def notice_seen(self, raw: bytes) -> None:
        """PreemptionNotice on `rota.ctl.run.<run_id>`: record it for our runs (the simulator
        acts on it; a local job reads it itself). `withdrawn` cancels one not yet acknowledged."""
        env = self._parse(raw, m.PreemptionNotice)
        if env is None:
            return
        notice: m.PreemptionNotice = env.data
        now = self.service.clock.now()
        async with self.service.engine.begin() as conn:
            row = await store.lock(conn, notice.run_id)
            if row is None or row.state != "running":
                return
            if notice.action == "withdrawn":
                if row.notice_id != notice.notice_id or row.notice_acked_at is not None:
                    return  # not the pending notice, or saved already: the stop follows
                values: dict[str, Any] = {"notice_id": None, "notice_at": None}
            elif row.notice_id == notice.notice_id:
                return  # a redelivery
            else:
                values = {"notice_id": notice.notice_id, "notice_at": now}
            await store.update(conn, notice.run_id, {**values, "updated_at": now})
            run = await store.get(conn, notice.run_id)
        assert run is not None
        log.info("run %s: notice %s %s", run.run_id, notice.notice_id,
                 "withdrawn" if notice.action == "withdrawn" else "received")
        self._backend.noticed(run)

    # ------------------------------------------------------------------ the Reporter

    async def launched(self, run_id: str, processes: list[WorkerProcess]) -> None:
        async with self.service.engine.begin() as conn:
            await store.update(conn, run_id, {"pids": [p.to_doc() for p in processes],
                                              "updated_at": self.service.clock.now()})

    async def new_token(self, run_id: str) -> str:
        run_token, token_hash = mint_token()
        async with self.service.engine.begin() as conn:
            await store.update(conn, run_id, {"token_sha256": token_hash,
                                              "updated_at": self.service.clock.now()})
        return run_token

    async def checkpointed(self, run: RunRecord, checkpoint: Checkpoint) -> None:
        """A checkpoint the backend made itself, recorded and published in one transaction."""
        async with self.service.engine.begin() as conn:
            row = await store.lock(conn, run.run_id)
            if row is None or row.state not in store.LIVE_STATES:
                return
            values = self._checkpoint_values(row, checkpoint.uri, checkpoint.at,
                                             checkpoint.progress_s, checkpoint.notice_id)
            if values:
                await store.update(conn, run.run_id, values)
            await self._emit_checkpointed(conn, run, checkpoint)
        self._wake()
        if checkpoint.notice_id:
            log.info("sim run %s saved %s and acknowledged notice %s", run.run_id,
                     checkpoint.uri, checkpoint.notice_id)

    async def ended(self, run_id: str, exit: Exit) -> None:
        """The run is over: finished, failed or stopped (see `domain.outcome`), reported once."""
        backend = self._backend
        now = self.service.clock.now()
        async with self.service.engine.begin() as conn:
            row = await store.lock(conn, run_id)
            if row is None or row.state not in store.LIVE_STATES:
                return
            run = store.record(row)
            result = outcome(run, exit, stop_reason=row.stop_reason,
                             stop_forced=bool(row.stop_forced), ended_at=now,
                             time_scale=backend.time_scale)
            await store.update(conn, run_id, {
                "state": result.state, "ended_at": now, "exit_code": exit.code,
                "outcome": type(result.event).__name__, "detail": result.detail[:2000],
                "updated_at": now,
            })
            await self._emit(conn, result.event, run, at=now)
        self._wake()
        metrics.run_ended(result, run, now, backend.time_scale)
        log.info("run %s %s: %s", run_id, result.state, result.detail)

    async def node_changed(self, node: str, problem: str | None) -> None:
        """`NodeWithdrawn` or `NodeRestored`, for the scheduler's placement."""
        event: m.NodeWithdrawn | m.NodeRestored = (
            m.NodeRestored(node=node) if problem is None
            else m.NodeWithdrawn(node=node, reason=problem[:256]))
        env = envelope(event, source=SOURCE, occurred_at=self.service.clock.now())
        async with self.service.engine.begin() as conn:
            await self.service.outbox.add(conn, env, EVENT_SUBJECTS[env.type], stream=STREAM_EVT)
        self._wake()

    async def node_drain(self, node: str, deadline_s: float | None, reason: str) -> None:
        """`NodeDrainRequested` for a cordon, `NodeDrainCancelled` for an uncordon (DECISIONS 100)."""
        now = self.service.clock.now()
        event: m.NodeDrainRequested | m.NodeDrainCancelled = (
            m.NodeDrainCancelled(node=node, requested_by="kubernetes") if deadline_s is None
            else m.NodeDrainRequested(node=node, deadline=now + timedelta(seconds=deadline_s),
                                      reason=reason[:256], requested_by="kubernetes"))
        env = envelope(event, source=SOURCE, occurred_at=now)
        async with self.service.engine.begin() as conn:
            await self.service.outbox.add(conn, env, EVENT_SUBJECTS[env.type], stream=STREAM_EVT)
        self._wake()

    async def run_eviction(self, run_id: str, job_id: str, node: str, pod: str,
                           requester: str, *, withdrawn: bool) -> None:
        """`RunEvictionRequested`: the scheduler stops the run as a drain would (DECISIONS 100)."""
        now = self.service.clock.now()
        event = m.RunEvictionRequested(run_id=run_id, job_id=job_id, node=node, pod=pod[:253],
                                       requester=requester[:317], withdrawn=withdrawn)
        env = envelope(event, source=SOURCE, job_id=job_id, run_id=run_id, occurred_at=now)
        async with self.service.engine.begin() as conn:
            await self.service.outbox.add(conn, env, EVENT_SUBJECTS[env.type], stream=STREAM_EVT)
        self._wake()

    # ------------------------------------------------------------------ announcements

    async def announce(self) -> None:
        """`ExecutorAnnounced`: this replica runs, and which jobs its backend runs. Valid for
        three intervals, so one lost (a slow relay, a pause) does not make it look gone."""
        backend, settings = self._backend, self.service.settings
        event = m.ExecutorAnnounced(
            backend=backend.name, needs=backend.needs, instance=self.instance,
            replica=self.service.partition.index, replicas=self.service.partition.count,
            valid_for_s=3 * settings.executor_announce_interval_s)
        env = envelope(event, source=SOURCE, occurred_at=self.service.clock.now())
        async with self.service.engine.begin() as conn:
            await self.service.outbox.add(conn, env, EVENT_SUBJECTS[env.type], stream=STREAM_EVT)
        self._wake()

    async def keep_announcing(self) -> None:
        """Announce again every `ROTA_EXECUTOR_ANNOUNCE_INTERVAL_S`, until cancelled; a
        failed announcement is logged and tried again at the next interval."""
        interval = self.service.settings.executor_announce_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                await self.announce()
            except Exception:
                log.exception("executor: could not announce itself; trying again in %.0f s",
                              interval)

    # ------------------------------------------------------------------ restart

    async def recover(self) -> None:
        """Take over the runs that were live when the executor last stopped."""
        backend = self._backend
        async with self.service.engine.connect() as conn:
            # With several replicas, each adopts the runs its partition starts and stops.
            live = [run for run in await store.live_runs(conn)
                    if self.service.partition.owns(run.run_id)]
        for run in live:
            if run.backend != backend.name:
                # Only a run placed on the old backend cannot go on; a job that waits has
                # no run, and the new backend runs it when it is admitted.
                await self.ended(run.run_id, Exit(None, (
                    f"the executor restarted with the {backend.name} backend; this"
                    f" {run.backend} run cannot continue")))
                stopped = stop_orphaned_processes(run)
                if stopped:
                    log.info("run %s: its %s processes %s told to stop (SIGTERM)", run.run_id,
                             run.backend, stopped)
                continue
            try:
                await backend.adopt(run)
            except Exception as exc:
                log.exception("run %s: could not be adopted after a restart", run.run_id)
                await self.ended(run.run_id, Exit(None, f"lost in a restart: {exc}"))
        if live:
            log.info("recovered %d live run(s)", len(live))


def stop_orphaned_processes(run: RunRecord) -> list[int]:
    """SIGTERM to the process groups of a local run that no backend of this executor will
    watch again (it restarted with another): the run has failed and its GPUs go back to the
    ledger, so its job must not keep running on them. The pids still alive, as recorded
    (with their start time, so a reused pid is left alone), that were signalled."""
    return [p.pid for p in run.processes
            if procs.alive(p.pid, p.start) and procs.signal_group(p.pid, signal.SIGTERM)]
