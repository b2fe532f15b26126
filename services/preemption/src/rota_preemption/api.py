"""The read API behind the CLI and the tests: core NATS request/reply on
`rota.sys.preemption.plans` (under `rota.sys.`, as `rota.api.>` belongs to the submission
service). Requests are `ListPreemptions` envelopes; replies are `ApiReply` envelopes whose
`result` is a list of plans, each with its victims and their outcomes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rota.bus.query import answer_query
from rota.contracts import messages as m
from rota.contracts.subjects import PREEMPTION_PLANS
from sqlalchemy.ext.asyncio import AsyncEngine

from rota_preemption import store

PLANS_SUBJECT = PREEMPTION_PLANS
SOURCE = "preemption"

_VICTIM_FIELDS = (
    "run_id", "job_id", "job_name", "team", "user_name", "queue", "gpus", "resumable",
    "notice_id", "grace_s", "deadline", "state", "outcome", "checkpoint_uri",
    "lost_gpu_seconds", "expected_lost_gpu_seconds", "noticed_at", "acked_at", "stop_sent_at",
    "done_at", "gpu_share",
)
_PLAN_FIELDS = (
    "plan_id", "preemptor_job_id", "preemptor_queue", "preemptor_team", "state", "reason",
    "message", "created_at", "updated_at", "completed_at",
)


def _jsonable(row: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {k: row[k].isoformat() if isinstance(row[k], datetime) else row[k] for k in fields}


async def list_plans(engine: AsyncEngine, query: m.ListPreemptions) -> m.ApiReply:
    async with engine.connect() as conn:
        sagas = await store.list_sagas(conn, plan_id=query.plan_id, job_id=query.job_id,
                                       open_only=query.open, limit=query.limit)
    return m.ApiReply(ok=True, result=[
        {**_jsonable(plan, _PLAN_FIELDS),
         "victims": [_jsonable(v, _VICTIM_FIELDS) for v in victims]}
        for plan, victims in sagas
    ])


async def answer(engine: AsyncEngine, raw: bytes, *, max_bytes: int) -> bytes:
    """One request's reply, always an envelope: errors are replies, never exceptions."""
    return await answer_query(raw, m.ListPreemptions, lambda q: list_plans(engine, q),
                              source=SOURCE, max_bytes=max_bytes)
