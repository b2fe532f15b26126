"""The `sim` backend: runs that only exist on a clock, for demos, benchmarks and tests.

Every tick it asks each run's `SimPlan` what is due and reports it: periodic checkpoints,
the acknowledgement of a notice `checkpoint_save_s` after it arrived, the end. The ack goes
out as the `RunCheckpointed` a real job would publish (run token, notice_id, on
`rota.evt.run.checkpointed`), so the coordinator cannot tell a simulated job from a real one.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from rota.clock import Clock
from rota.contracts.job import JobSpec

from rota_executor.backend import Checkpoint, Exit, Reporter, RunRecord
from rota_executor.domain import sim_uri
from rota_executor.simulation import Acknowledged, Checkpointed, Ended, SimPlan

log = logging.getLogger("rota.executor.sim")


class SimBackend:
    name = "sim"
    needs: str | None = None

    def __init__(self, reporter: Reporter, clock: Clock, *, speed: float, tick_s: float) -> None:
        self.reporter = reporter
        self.clock = clock
        self.time_scale = speed
        self.tick_s = tick_s
        self.plans: dict[str, SimPlan] = {}
        self._notices: dict[str, RunRecord] = {}
        """Notice changes not yet folded into their plan (see `noticed`)."""
        self._next_due: dict[str, datetime | None] = {}
        """When each run has something to report next (`SimPlan.next_due`); a run not in it
        (just started) is asked at the next tick."""
        self._lock = asyncio.Lock()

    def unsupported(self, spec: JobSpec) -> str | None:
        return None  # a spec without a `sim` section plays for its declared runtime

    async def start(self, run: RunRecord, run_token: str = "") -> None:
        self.plans[run.run_id] = SimPlan.of(run, self.time_scale)
        self._next_due.pop(run.run_id, None)
        log.info("sim run %s of job %s started at progress %.0f s", run.run_id, run.job_id,
                 self.plans[run.run_id].p0)

    async def adopt(self, run: RunRecord) -> None:
        if run.state == "stopping":
            await self.reporter.ended(run.run_id, Exit(None, "simulation stopped"))
            return
        await self.start(run)

    async def stop(self, run: RunRecord) -> None:
        async with self._lock:  # never in the middle of reporting this run's tick
            plan = self.plans.pop(run.run_id, None)
            self._notices.pop(run.run_id, None)
            self._next_due.pop(run.run_id, None)
        progress = f" at progress {plan.progress(self.clock.now()):.0f} s" if plan else ""
        await self.reporter.ended(run.run_id, Exit(None, f"simulation stopped{progress}"))

    def noticed(self, run: RunRecord) -> None:
        # Folded in by the next tick, not here: a tick that is reporting this run holds its
        # older plan across the report and stores it afterwards, which would drop the notice.
        self._notices[run.run_id] = run

    async def tick(self) -> None:
        """Report everything due by now. A failed report is retried at the next tick."""
        now = self.clock.now()
        async with self._lock:
            for run_id in list(self.plans):
                plan = self.plans.get(run_id)
                if plan is None:
                    continue
                noticed = self._notices.pop(run_id, None)
                if noticed is not None:
                    plan = self.plans[run_id] = plan.with_notice(noticed)
                elif run_id in self._next_due and not self._due(self._next_due[run_id], now):
                    continue
                try:
                    for action in plan.due(now):
                        await self._report(plan, action)
                        plan = plan.after(action)
                        if isinstance(action, Ended):
                            self.plans.pop(run_id, None)
                            self._notices.pop(run_id, None)
                        else:
                            self.plans[run_id] = plan
                except Exception:
                    log.exception("sim run %s: reporting failed; retrying", run_id)
                if run_id in self.plans:
                    self._next_due[run_id] = self.plans[run_id].next_due()
                else:
                    self._next_due.pop(run_id, None)

    @staticmethod
    def _due(next_due: datetime | None, now: datetime) -> bool:
        return next_due is not None and next_due <= now

    async def _report(self, plan: SimPlan, action: Checkpointed | Acknowledged | Ended) -> None:
        run = plan.run
        if isinstance(action, Ended):
            if action.finished:
                exit = Exit(0, f"simulated run finished at {action.progress_s:.0f} s")
            else:
                exit = Exit(1, f"simulated failure at {action.progress_s:.0f} s of progress")
            await self.reporter.ended(run.run_id, exit)
            return
        notice_id = action.notice_id if isinstance(action, Acknowledged) else None
        await self.reporter.checkpointed(run, Checkpoint(
            uri=sim_uri(run.job_id, action.progress_s), at=action.at,
            progress_s=action.progress_s, notice_id=notice_id,
        ))

    async def run(self) -> None:
        while True:
            await self.tick()
            await asyncio.sleep(self.tick_s)

    async def close(self) -> None:
        self.plans.clear()
        self._notices.clear()
        self._next_due.clear()
