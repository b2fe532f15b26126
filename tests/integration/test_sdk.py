"""The job-side protocol over real NATS: a notice reaches the job, and its acknowledgement is a
request to the executor that carries the run token and goes onto no stream."""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime, timedelta

import pytest
from nats.aio.client import Client
from rota import sdk
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.endpoints import Endpoints
from rota.ids import new_id

from tests.integration.harness import eventually, stream_last_seq
from tests.integration.run_protocol import executor_side


def run_env(endpoints: Endpoints, run_id: str, job_id: str, token: str) -> dict[str, str]:
    return {
        "ROTA_RUN_ID": run_id, "ROTA_JOB_ID": job_id, "ROTA_RUN_TOKEN": token,
        "ROTA_ATTEMPT": "2", "ROTA_NATS_URL": endpoints.nats_url,
        "ROTA_RESUME_FROM": "file:///ckpt/1",
    }


async def send_notice(nc: Client, run_id: str, job_id: str, action: str, notice_id: str) -> None:
    notice = m.PreemptionNotice(
        notice_id=notice_id, plan_id=new_id(), run_id=run_id, job_id=job_id, action=action,  # type: ignore[arg-type]
        deadline=datetime.now(UTC) + timedelta(seconds=300), grace_s=300,
        ack_subject=s.run_checkpoint(run_id), reason="reclaimed by production",
    )
    env = envelope(notice, source="preemption", job_id=job_id, run_id=run_id)
    await nc.jetstream().publish(s.control(run_id), env.to_bytes(), stream=s.STREAM_CTL,
                                 headers={"Nats-Msg-Id": env.id})


async def test_notice_then_acknowledgement(nc: Client, endpoints: Endpoints) -> None:
    run_id, job_id, token = new_id(), new_id(), secrets.token_urlsafe(24)
    notice_id = new_id()
    # Sent before the job listens: it must still be seen.
    await send_notice(nc, run_id, job_id, "checkpoint_and_stop", notice_id)
    since = {stream: await stream_last_seq(nc, stream) for stream in s.STREAM_SUBJECTS}
    async with executor_side(nc, run_id) as executor:
        run = await asyncio.to_thread(sdk.attach, run_env(endpoints, run_id, job_id, token))
        try:
            assert run.resume_from == "file:///ckpt/1"
            assert await asyncio.to_thread(run.wait_for_preemption, 10)
            assert run.notice is not None and run.notice.notice_id == notice_id
            await asyncio.to_thread(run.acknowledge, "file:///ckpt/2")
        finally:
            await asyncio.to_thread(run.close)
    # `acknowledge` returned: the executor had answered.
    assert [r.model_dump() for r in executor.reports] == [{
        "run_id": run_id, "job_id": job_id, "checkpoint_uri": "file:///ckpt/2",
        "run_token": token, "notice_id": notice_id, "progress_s": None,
    }]
    for stream, seq in since.items():
        assert await stream_last_seq(nc, stream) == seq, f"the SDK wrote to {stream}"


async def test_a_refused_report_raises_with_the_executors_reason(
        nc: Client, endpoints: Endpoints) -> None:
    run_id, job_id = new_id(), new_id()
    async with executor_side(nc, run_id, refuse=True):
        run = await asyncio.to_thread(sdk.attach, run_env(endpoints, run_id, job_id, "t" * 20))
        try:
            with pytest.raises(sdk.SdkError, match="UNAUTHORISED"):
                await asyncio.to_thread(run.report_checkpoint, "file:///ckpt/1")
        finally:
            await asyncio.to_thread(run.close)


async def test_a_report_waits_for_an_executor_that_is_away(
        nc: Client, endpoints: Endpoints) -> None:
    run_id, job_id = new_id(), new_id()
    run = await asyncio.to_thread(sdk.attach, run_env(endpoints, run_id, job_id, "t" * 20))
    try:
        reporting = asyncio.create_task(
            asyncio.to_thread(run.report_checkpoint, "file:///ckpt/1", 30.0))
        await asyncio.sleep(1.0)  # nobody answers yet: the SDK asks again
        assert not reporting.done()
        async with executor_side(nc, run_id) as executor:
            await reporting
        assert [r.checkpoint_uri for r in executor.reports] == ["file:///ckpt/1"]
    finally:
        await asyncio.to_thread(run.close)


async def test_a_withdrawn_notice_clears_the_request(nc: Client, endpoints: Endpoints) -> None:
    run_id, job_id, notice_id = new_id(), new_id(), new_id()
    run = await asyncio.to_thread(sdk.attach, run_env(endpoints, run_id, job_id, "t" * 20))
    try:
        await send_notice(nc, run_id, job_id, "checkpoint_and_stop", notice_id)
        assert await asyncio.to_thread(run.wait_for_preemption, 10)
        await send_notice(nc, run_id, job_id, "withdrawn", notice_id)
        await eventually(lambda: _not_requested(run))
    finally:
        await asyncio.to_thread(run.close)


async def _not_requested(run: sdk.Run) -> bool:
    return not run.preemption_requested


def test_outside_a_run_the_sdk_says_what_is_missing() -> None:
    with pytest.raises(sdk.SdkError, match="ROTA_RUN_ID"):
        sdk.attach({})
