"""500 jobs through the live stack while every service is killed -9 once and restarted.

Afterwards: no job is lost, every job finished, no GPU was ever booked twice (the ledger's
rows, interval by interval), every preempted job resumed from its checkpoint, and the ledger
balances to zero.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import nats
import pytest
import sqlalchemy as sa
from nats.aio.client import Client
from rota.cli.running import Executor, Stack
from rota.cli.stack import SERVICES
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.db.engine import async_url
from rota.settings import Settings
from sqlalchemy.ext.asyncio import create_async_engine

pytestmark = pytest.mark.e2e

JOBS = 500
CONFIG = Path(__file__).with_name("chaos.rota.yaml")
SPEED = 300.0
TEAMS = {"alpha": ("production", "training", "training", "experiment"),
         "beta": ("production", "training", "training", "experiment"),
         "gamma": ("experiment",)}


def job_spec(i: int, rng: random.Random) -> m.SubmitJob:
    team = rng.choice(("alpha", "alpha", "beta", "beta", "gamma"))
    shape = rng.choice(((1, 1), (1, 2), (1, 4), (1, 8), (1, 8), (2, 8)))
    resumable = rng.random() < 0.8
    duration = rng.uniform(120, 900)
    return m.SubmitJob.model_validate({
        "name": f"chaos-{i}", "team": team, "user": team, "queue": rng.choice(TEAMS[team]),
        "flavor": "gpu", "workers": shape[0], "gpus_per_worker": shape[1],
        "resumable": resumable, "declared_runtime_s": int(duration * 1.5),
        "submission_id": f"chaos-{i}",
        "sim": {"duration_s": duration, "checkpoint_interval_s": 60.0 if resumable else None,
                "checkpoint_save_s": 10.0},
    })


async def submit_once(nc: Client, spec: m.SubmitJob) -> str:
    """Submit, retrying while the submission service is down: the same submission_id makes
    every retry safe, as it does for any producer."""
    for _ in range(120):
        try:
            raw = await nc.request(s.api_submit(spec.team),
                                   envelope(spec, source="chaos").to_bytes(), timeout=5)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            await asyncio.sleep(0.5)
            continue
        reply = m.ApiReply.model_validate(json.loads(raw.data)["data"])
        assert reply.ok, reply.error
        return str(reply.result["job_id"])
    raise AssertionError(f"{spec.submission_id} never accepted")


async def submit_all(nc: Client, rng: random.Random) -> list[str]:
    ids = []
    for i in range(JOBS):
        ids.append(await submit_once(nc, job_spec(i, rng)))
        if i % 100 == 99:
            await asyncio.sleep(3)  # waves, so later production work meets a full cluster
    return ids


async def states(nc: Client) -> dict[str, str]:
    raw = await nc.request(s.API_JOBS_LIST, envelope(m.ListJobs(limit=10_000), source="chaos")
                           .to_bytes(), timeout=30)
    reply = m.ApiReply.model_validate(json.loads(raw.data)["data"])
    return {row["job_id"]: row["state"] for row in reply.result or []}


async def chaos(stack: Stack, rng: random.Random, stop: asyncio.Event) -> list[str]:
    """Kill each service once, at random moments, while restarting whatever is dead."""
    victims = list(SERVICES)
    rng.shuffle(victims)
    killed: list[str] = []
    next_kill = time.monotonic() + 3
    restarts: dict[str, float] = {}
    while not stop.is_set():
        if victims and time.monotonic() >= next_kill:
            name = victims.pop()
            process = next(p for p in stack.processes if p.name == name)
            assert process.process is not None
            process.process.kill()
            killed.append(name)
            next_kill = time.monotonic() + rng.uniform(3, 8)
        stack.restart_dead(restarts)
        await asyncio.sleep(0.3)
    return killed


async def drive(stack: Stack) -> tuple[list[str], dict[str, str], list[str]]:
    assert stack.endpoints is not None
    # As the admin of the authenticated embedded server the stack started.
    nc = await nats.connect(stack.endpoints.nats_url, user_credentials=stack.endpoints.nats_creds)
    rng = random.Random(20261130)
    stop = asyncio.Event()
    killer = asyncio.create_task(chaos(stack, random.Random(7), stop))
    try:
        ids = await submit_all(nc, rng)
        deadline = time.monotonic() + 600
        final: dict[str, str] = {}
        while time.monotonic() < deadline:
            try:
                final = await states(nc)
            except Exception:  # the submission service may be down this very moment
                final = {}
            if len(final) >= JOBS and all(v in ("finished", "failed", "cancelled")
                                          for v in final.values()):
                break
            await asyncio.sleep(2)
    finally:
        stop.set()
        killed = await killer
        await nc.close()
    return ids, final, killed


async def ledger_facts(url: str) -> dict[str, Any]:
    engine = create_async_engine(async_url(url))
    try:
        async with engine.connect() as conn:
            async def scalar(query: str) -> Any:
                return (await conn.execute(sa.text(query))).scalar_one()

            overlaps = await scalar("""
                SELECT count(*) FROM ledger.allocations a JOIN ledger.allocations b
                  ON a.node = b.node AND a.gpu = b.gpu AND a.id < b.id
                 AND a.granted_at < coalesce(b.released_at, 'infinity')
                 AND b.granted_at < coalesce(a.released_at, 'infinity')""")
            active = await scalar("SELECT count(*) FROM ledger.allocations WHERE released_at IS NULL")
            rows = await scalar("SELECT count(*) FROM ledger.allocations")
            resumes = (await conn.execute(sa.text("""
                SELECT stop.job_id, stop.data->>'checkpoint_uri' AS checkpoint,
                       (SELECT start.data->>'resumed_from' FROM submission.job_events start
                         WHERE start.job_id = stop.job_id AND start.type = 'RunStarted'
                           AND start.occurred_at > stop.occurred_at
                         ORDER BY start.occurred_at LIMIT 1) AS resumed_from
                  FROM submission.job_events stop
                 WHERE stop.type = 'RunStopped' AND stop.data->>'reason' = 'preempted'"""))).all()
        return {"overlaps": overlaps, "active": active, "rows": rows,
                "resumes": [tuple(r) for r in resumes]}
    finally:
        await engine.dispose()


# 500 jobs take about 2.5 minutes alone on 2 cores; the drive allows 10 more for every job to
# end, and the suite-wide 300 s limit would cut a run on a loaded machine short.
@pytest.mark.timeout(1200)
def test_chaos_loses_nothing_and_double_books_nothing(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, nats_url=None, database_url=None)
    stack = Stack(settings, CONFIG, Executor.sim, extra_env={
        "ROTA_SIM_SPEED": str(SPEED), "ROTA_SCHEDULER_TICK_S": "0.5", "ROTA_LOG_LEVEL": "WARNING",
        "ROTA_ACK_WAIT_S": "5", "ROTA_SCHEDULER_LEASE_TTL_S": "3",
    }, say=lambda text: None)
    try:
        stack.start()
        ids, final, killed = asyncio.run(drive(stack))
        assert stack.endpoints is not None
        facts = asyncio.run(ledger_facts(stack.endpoints.database_url))
    finally:
        stack.stop()
    assert sorted(killed) == sorted(SERVICES)
    assert set(ids) <= set(final) and len(ids) == JOBS
    unfinished = {job: state for job, state in final.items() if state != "finished"}
    assert unfinished == {}
    assert facts["rows"] > 0
    assert facts["overlaps"] == 0
    assert facts["active"] == 0
    assert facts["resumes"], "the run should have preempted something"
    for job_id, checkpoint, resumed_from in facts["resumes"]:
        assert resumed_from is not None or checkpoint is None, job_id
        if checkpoint is not None:
            assert resumed_from == checkpoint, job_id
