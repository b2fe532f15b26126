"""GPU shares live (DECISIONS 66, 80, 84-86): submission, scheduler, ledger, coordinator and a
`sim` executor as real processes on a NATS server and a database of their own (the
scheduler's view is the whole stream, and the ledger's GPUs are the whole table).

One shareable node of one GPU. Two experiment halves run on it together; a production half
then stops one of them through the coordinator's saga (notice, checkpoint, stop, release),
runs beside the other, and once it is cancelled the stopped half resumes from its checkpoint.
Every step waits on an event or a row, never on time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.endpoints import Endpoints
from sqlalchemy.ext.asyncio import create_async_engine

from tests.builders import submit_job
from tests.integration.harness import api, eventually
from tests.integration.test_elastic_live import Stack, _one, live_services

CONFIG: dict[str, Any] = {
    "cluster": {"flavors": [{"name": "h100", "shareable": True}],
                "nodes": [{"name": "node-0", "flavor": "h100", "gpus": 1}]},
    "queues": {"production": {"preemptible": False, "preemption_grace_s": 60},
               "training": {"preemption_grace_s": 60},
               "experiment": {"preemption_grace_s": 60}},
    "teams": {"nlp": {"quota": {"h100": 1}}, "research": {"quota": {"h100": 0}}},
    "preemption": {"min_runtime_s": 1, "delay_s": 0},
}
SERVICES = ("submission", "ledger", "preemption", "executor", "scheduler")
LONG = {"duration_s": 36_000, "checkpoint_interval_s": 2, "checkpoint_save_s": 1}


@dataclass
class ShareStack(Stack):
    database_url: str = ""

    async def submit_share(self, team: str, queue: str, name: str) -> str:
        reply = await api(self.nc, s.api_submit(team), submit_job(
            name=name, team=team, user="dave", queue=queue, gpus_per_worker=1,
            gpu_share=0.5, resumable=True, sim=LONG))
        assert reply.ok, reply.error
        job_id: str = reply.result["job_id"]
        return job_id

    async def claims(self) -> list[tuple[str, int, str, int]]:
        """The ledger's per-GPU claims, read from its table: quarters held on each GPU."""
        engine = create_async_engine(self.database_url)
        try:
            async with engine.connect() as conn:
                rows = await conn.execute(sa.text(
                    "SELECT node, gpu, kind, used FROM ledger.gpu_claims ORDER BY node, gpu"))
                return [(r.node, r.gpu, r.kind, r.used) for r in rows]
        finally:
            await engine.dispose()

    async def in_use(self, team: str, queue: str) -> Any:
        reply = await api(self.nc, s.API_QUEUES_SUMMARY, m.SummarizeQueues(team=team))
        assert reply.ok, reply.error
        return next((r["gpus_in_use"] for r in reply.result
                     if (r["queue"], r["flavor"]) == (queue, "h100")), 0)


@pytest.fixture
async def stack(server_endpoints: Endpoints, tmp_path: Path) -> AsyncIterator[ShareStack]:
    async with live_services(server_endpoints, tmp_path, CONFIG, SERVICES, "rota_shares") as (
        client, services, database_url,
    ):
        yield ShareStack(client, services, database_url)


def _on(started: dict[str, Any]) -> list[tuple[str, list[int], float | None]]:
    return [(w["node"], w["gpus"], w.get("gpu_share")) for w in started["data"]["placement"]]


async def _settled(stack: ShareStack, check: Any) -> Any:
    try:
        return await eventually(check, timeout=60)
    except AssertionError:
        raise AssertionError(stack.logs()) from None


async def test_two_halves_share_a_gpu_and_a_production_half_stops_only_one_of_them(
    stack: ShareStack,
) -> None:
    a = await stack.submit_share("research", "experiment", "half-a")
    b = await stack.submit_share("research", "experiment", "half-b")
    [run_a] = await _one(stack, "RunStarted", a)
    [run_b] = await _one(stack, "RunStarted", b)
    assert _on(run_a) == _on(run_b) == [("node-0", [0], 0.5)]
    assert await stack.claims() == [("node-0", 0, "shared", 4)]  # both halves, one GPU
    why = await api(stack.nc, s.API_JOB_WHY, m.GetJob(job_id=a))
    assert why.ok and why.result["gpu_share"] == 0.5
    # Two halves in use count one GPU (DECISIONS 86), once the read model has both running.
    assert await _settled(stack, lambda: _equals(stack.in_use("research", "experiment"), 1))
    await asyncio.sleep(1.5)  # past the minimum runtime, so they may be victims

    urgent = await stack.submit_share("nlp", "production", "urgent-half")
    [plan] = await _one(stack, "PreemptionRequested", urgent)
    [victim] = plan["data"]["victims"]
    assert victim["job_id"] in (a, b) and (victim["gpus"], victim["gpu_share"]) == (0, 0.5)
    stopped_job = victim["job_id"]
    kept_job, kept_run = (b, run_b) if stopped_job == a else (a, run_a)
    first_run = run_a if stopped_job == a else run_b
    [noticed] = await _one(stack, "PreemptionNoticed", stopped_job)
    assert noticed["data"]["plan_id"] == plan["data"]["plan_id"]
    [done] = await _one(stack, "PreemptionCompleted", urgent)
    [result] = done["data"]["victims"]
    assert result["outcome"] == "acked" and result["checkpoint_uri"]
    [stopped] = await _one(stack, "RunStopped", stopped_job)
    assert stopped["run_id"] == first_run["run_id"] and stopped["data"]["reason"] == "preempted"
    assert not stopped["data"]["forced"]
    assert not await stack.of("RunStopped", kept_job)  # only that share was stopped

    [started] = await _one(stack, "RunStarted", urgent)
    assert _on(started) == [("node-0", [0], 0.5)]
    owners = sorted(run for _, _, run in await stack.active_gpus())
    assert owners == sorted([kept_run["run_id"], started["run_id"]])
    assert await stack.claims() == [("node-0", 0, "shared", 4)]
    plans = await api(stack.nc, s.PREEMPTION_PLANS, m.ListPreemptions(job_id=urgent))
    assert plans.ok
    [listed] = plans.result[0]["victims"]
    assert (listed["gpus"], listed["gpu_share"], listed["outcome"]) == (0, 0.5, "acked")

    cancelled = await api(stack.nc, s.api_cancel("nlp"), m.CancelJob(job_id=urgent, team="nlp"))
    assert cancelled.ok, cancelled.error
    _, again = await _one(stack, "RunStarted", stopped_job, count=2)
    assert again["data"]["attempt"] == 2
    assert again["data"]["resumed_from"] == result["checkpoint_uri"]
    assert _on(again) == [("node-0", [0], 0.5)]
    assert await stack.claims() == [("node-0", 0, "shared", 4)]


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)
