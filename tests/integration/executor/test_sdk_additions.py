"""The SDK's additions over real NATS: the notice callback, the context manager, periodic
checkpoint reports, and the environment helpers (the executor's side played by the test)."""

from __future__ import annotations

import asyncio
import secrets
import threading
from dataclasses import dataclass, field

from nats.aio.client import Client
from rota import sdk
from rota.contracts import messages as m
from rota.endpoints import Endpoints
from rota.ids import new_id

from tests.integration.executor.helpers import send_notice
from tests.integration.run_protocol import executor_side


def env(endpoints: Endpoints, run: FakeRun) -> dict[str, str]:
    return {"ROTA_RUN_ID": run.run_id, "ROTA_JOB_ID": run.job_id, "ROTA_RUN_TOKEN": run.run_token,
            "ROTA_ATTEMPT": "1", "ROTA_NATS_URL": endpoints.nats_url}


@dataclass(frozen=True)
class FakeRun:
    """A run with no executor behind it: the SDK only needs its ids and token."""

    run_id: str = field(default_factory=new_id)
    job_id: str = field(default_factory=new_id)
    run_token: str = field(default_factory=lambda: secrets.token_urlsafe(24))


async def test_on_preemption_calls_back_once_and_the_context_manager_closes(
        nc: Client, endpoints: Endpoints) -> None:
    run_cmd = FakeRun()
    seen: list[m.PreemptionNotice] = []
    called = threading.Event()

    def callback(notice: m.PreemptionNotice) -> None:
        seen.append(notice)
        called.set()

    def attach_and_report() -> sdk.Run:
        run = sdk.attach(env(endpoints, run_cmd))
        run.on_preemption(callback)
        run.report_checkpoint("file:///ckpt/periodic", progress_s=12.5)
        return run

    async with executor_side(nc, run_cmd.run_id) as executor:
        with await asyncio.to_thread(attach_and_report) as run:
            notice_id = await send_notice(nc, run_cmd)
            assert await asyncio.to_thread(called.wait, 10)
            late: list[str] = []
            run.on_preemption(lambda n: late.append(n.notice_id))  # registered after: at once
            assert late == [notice_id]
            await asyncio.to_thread(run.acknowledge, "file:///ckpt/final")
    assert [n.notice_id for n in seen] == [notice_id]
    periodic, ack = (r.model_dump() for r in executor.reports)
    assert periodic == {"run_id": run_cmd.run_id, "job_id": run_cmd.job_id,
                        "checkpoint_uri": "file:///ckpt/periodic", "run_token": run_cmd.run_token,
                        "notice_id": None, "progress_s": 12.5}
    assert ack["notice_id"] == notice_id and ack["checkpoint_uri"] == "file:///ckpt/final"


def test_resume_from_and_checkpoint_dir_read_the_environment() -> None:
    assert sdk.resume_from({"ROTA_RESUME_FROM": "file:///c/1"}) == "file:///c/1"
    assert sdk.resume_from({"ROTA_RESUME_FROM": ""}) is None
    assert sdk.resume_from({}) is None
    assert sdk.checkpoint_dir({"ROTA_CHECKPOINT_DIR": "/ckpt"}) == "/ckpt"
    assert sdk.checkpoint_dir({}) is None
