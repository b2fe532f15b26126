"""The read API on `rota.api.>`: job get, job list and queue summary, from the projection."""

from __future__ import annotations

from rota.contracts import messages as m
from sqlalchemy.ext.asyncio import AsyncEngine

from rota_submission import store


def error(code: str, message: str, field: str | None = None) -> m.ApiReply:
    return m.ApiReply(ok=False, error=m.ApiError(code=code, field=field, message=message))


async def get_job(engine: AsyncEngine, query: m.GetJob) -> m.ApiReply:
    async with engine.connect() as conn:
        rows = await store.find_job(conn, query.job_id)
    if not rows:
        return error("JOB_NOT_FOUND", f"no job {query.job_id}", "job_id")
    if len(rows) > 1:
        return error("AMBIGUOUS_ID", f"{query.job_id!r} matches several jobs", "job_id")
    return m.ApiReply(ok=True, result=rows[0])


async def list_jobs(engine: AsyncEngine, query: m.ListJobs) -> m.ApiReply:
    async with engine.connect() as conn:
        rows = await store.list_jobs(
            conn, team=query.team, queue=query.queue.value if query.queue else None,
            state=query.state, limit=query.limit,
        )
    return m.ApiReply(ok=True, result=rows)


async def summarize_queues(engine: AsyncEngine, query: m.SummarizeQueues) -> m.ApiReply:
    async with engine.connect() as conn:
        rows = await store.queue_summary(conn, query.team)
    return m.ApiReply(ok=True, result=rows)
