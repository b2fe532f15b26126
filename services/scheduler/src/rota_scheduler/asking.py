"""`rota why`, answered afresh: the leader explains a pending job in its next cycle, on request.

The read model holds the last explanation the scheduler published, which may lag a deep
queue's refresh pass. On `rota.sys.scheduler.why` (a `GetJob`), the leader adds the job to the
jobs its next cycle asks the policy about, and answers with that explanation once the cycle has
decided: the explanation a new JobPending would carry, with the time it was made. Only the
leader subscribes, from when it has rebuilt its view; with none, the submission service gets no
answer and shows the published explanation. A cycle asks about at most `ASKED_PER_CYCLE` such
jobs, so a burst of questions cannot make one cycle explain the whole queue.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from nats.aio.msg import Msg
from rota.bus.query import answer_query, api_error
from rota.contracts import messages as m
from rota.contracts.lifecycle import Phase
from rota_policy import Decisions

from rota_scheduler.actions import pending_event
from rota_scheduler.view import ClusterView

ASKED_PER_CYCLE = 100
"""Jobs asked about on request that one cycle explains at most; the rest wait a cycle."""
ANSWER_WITHIN_S = 2.0
"""How long a question waits for its cycle before it is answered UNAVAILABLE."""
SOURCE = "scheduler"


class Questions:
    """Questions waiting for the next cycle's explanations, by job."""

    def __init__(self, view: ClusterView, wake: Callable[[], None], *, max_bytes: int) -> None:
        self.view = view
        self.wake = wake
        self.max_bytes = max_bytes
        self.waiting: dict[str, list[asyncio.Future[dict[str, Any]]]] = {}

    def take(self) -> frozenset[str]:
        """The jobs the next cycle asks about for these questions."""
        return frozenset(list(self.waiting)[:ASKED_PER_CYCLE])

    def answer(self, asked: frozenset[str], decisions: Decisions, now: float) -> None:
        """Answer every question about the jobs `asked` from the cycle's `decisions`: the
        explanation, or that the job no longer waits (admitted this cycle, cancelled)."""
        if not asked:
            return
        explained = {e.job_id: e for e in decisions.pending if e.job_id in asked}
        for job_id in asked:
            futures = self.waiting.pop(job_id, [])
            job, explanation = self.view.jobs.get(job_id), explained.get(job_id)
            if job is None or explanation is None:
                result: dict[str, Any] = {"pending": False,
                                          "state": None if job is None else job.phase.value}
            else:
                result = {"pending": True,
                          **pending_event(job, explanation).model_dump(mode="json"),
                          "explained_at": datetime.fromtimestamp(now, UTC).isoformat()}
            for future in futures:
                if not future.done():
                    future.set_result(result)

    async def on_request(self, msg: Msg) -> None:
        reply = await answer_query(msg.data, m.GetJob, self._explain, source=SOURCE,
                                   max_bytes=self.max_bytes)
        if msg.reply:
            await msg.respond(reply)

    async def _explain(self, query: m.GetJob) -> m.ApiReply:
        job = self.view.jobs.get(query.job_id)
        if job is None:
            return api_error("JOB_NOT_FOUND", f"the scheduler has no job {query.job_id}", "job_id")
        if job.phase is not Phase.PENDING or job.cancelled:
            return m.ApiReply(ok=True, result={"pending": False, "state": job.phase.value})
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(job.job_id, []).append(future)
        self.wake()
        try:
            result = await asyncio.wait_for(future, ANSWER_WITHIN_S)
        except TimeoutError:
            return api_error("UNAVAILABLE", "the scheduler did not explain the job in time")
        finally:
            waiting = self.waiting.get(job.job_id)
            if waiting is not None and future in waiting:
                waiting.remove(future)
                if not waiting:
                    del self.waiting[job.job_id]
        return m.ApiReply(ok=True, result=result)
