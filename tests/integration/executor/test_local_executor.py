"""The executor's local backend: real processes, the example script, signals, and a restart."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import sqlalchemy as sa
from nats.aio.client import Client
from nats.js.errors import NotFoundError
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.db.engine import make_engine
from rota.endpoints import Endpoints

from tests.integration.executor.conftest import executor_process, started
from tests.integration.executor.helpers import (
    seconds_between,
    send_notice,
    start_run,
    stop_run,
    wait_event,
)
from tests.integration.harness import ServiceProcess, eventually, stream_last_seq

TRAIN_PLAIN = Path(__file__).resolve().parents[3] / "examples" / "train_plain.py"
LOCAL_ENV = {"ROTA_EXECUTOR": "local", "ROTA_KILL_GRACE_S": "1",
             "ROTA_EXECUTOR_POLL_INTERVAL_S": "0.1"}
# Ignores SIGTERM, so only the SIGKILL after the kill grace ends it.
STUBBORN = ("import signal, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: print('SIGTERM ignored', flush=True))\n"
            "print('up', flush=True)\n"
            "time.sleep(600)\n")


@pytest.fixture(scope="module")
async def executor(endpoints: Endpoints, nc: Client, executor_home: Path
                   ) -> AsyncIterator[ServiceProcess]:
    async for service in started(endpoints, nc, executor_home, **LOCAL_ENV):
        yield service


def train_plain(**env: str) -> dict[str, Any]:
    return {"local": {"command": [sys.executable, str(TRAIN_PLAIN)],
                      "env": {"TRAIN_STEPS": "100000", "TRAIN_STEP_S": "0.02",
                              "TRAIN_CHECKPOINT_EVERY": "25", **env}}}


def command(*argv: str, resumable: bool = False) -> dict[str, Any]:
    return {"resumable": resumable, "local": {"command": list(argv)}}


def run_log(home: Path, run: m.StartRun) -> str:
    path = home / "runs" / f"{run.run_id}.log"
    return path.read_text(errors="replace") if path.exists() else ""


async def logged(home: Path, run: m.StartRun, text: str) -> bool:
    return text in run_log(home, run)


async def test_train_plain_acks_a_notice_then_resumes_from_its_file(
        nc: Client, executor: ServiceProcess, executor_home: Path) -> None:
    since = await stream_last_seq(nc)
    first = await start_run(nc, spec=train_plain(), gpus=(2, 3), node="h100-1")
    await wait_event(nc, first.run_id, since, "RunStarted")
    # A periodic checkpoint the job reported: it is attached and listening. The executor
    # checked the job's token and published the checkpoint without it.
    periodic = await wait_event(nc, first.run_id, since, "RunCheckpointed")
    assert periodic["source"] == "executor" and periodic["data"]["notice_id"] is None
    assert "CUDA_VISIBLE_DEVICES=2,3" in run_log(executor_home, first)

    notice_id = await send_notice(nc, first)
    ack = await wait_event(nc, first.run_id, since, "RunCheckpointed",
                           where=lambda e: e["data"]["notice_id"] == notice_id)
    assert "run_token" not in ack["data"]
    uri = ack["data"]["checkpoint_uri"]
    assert uri.startswith("file://")
    assert await asyncio.to_thread(Path(uri.removeprefix("file://")).exists)
    await stop_run(nc, first, "preempted")
    stopped = await wait_event(nc, first.run_id, since, "RunStopped")
    assert stopped["data"]["reason"] == "preempted" and stopped["data"]["forced"] is False
    assert stopped["data"]["checkpoint_uri"] == uri
    assert stopped["data"]["lost_gpu_seconds"] <= 2 * seconds_between(ack, stopped) + 0.01
    assert "acknowledged; exiting" in run_log(executor_home, first)
    saved_step = run_log(executor_home, first).split("preemption notice: saved step ")[1].split()[0]

    second = await start_run(nc, spec=train_plain(), job_id=first.job_id, attempt=2,
                             resume_from=uri, gpus=(2, 3), node="h100-1")
    resumed = await wait_event(nc, second.run_id, since, "RunStarted")
    assert resumed["data"]["resumed_from"] == uri
    await eventually(lambda: logged(executor_home, second, f"resumed from step {saved_step} ({uri})"))
    await stop_run(nc, second, "cancelled")
    ended = await wait_event(nc, second.run_id, since, "RunStopped")
    assert ended["data"]["reason"] == "cancelled"
    assert "SIGTERM: saved step" in run_log(executor_home, second)


async def test_a_stop_without_ack_is_sigterm_then_sigkill_and_loses_the_work(
        nc: Client, executor: ServiceProcess, executor_home: Path) -> None:
    since = await stream_last_seq(nc)
    run = await start_run(nc, spec=command(sys.executable, "-c", STUBBORN), gpus=(5,))
    started_ = await wait_event(nc, run.run_id, since, "RunStarted")
    await eventually(lambda: logged(executor_home, run, "up"))
    await stop_run(nc, run, "preempted", forced=True)
    stopped = await wait_event(nc, run.run_id, since, "RunStopped")
    assert stopped["data"]["forced"] is True and stopped["data"]["checkpoint_uri"] is None
    # Not resumable: everything since the start is lost, on its 1 GPU.
    assert stopped["data"]["lost_gpu_seconds"] == pytest.approx(
        seconds_between(started_, stopped), abs=0.01)
    assert stopped["data"]["lost_gpu_seconds"] > 0
    assert "SIGTERM ignored" in run_log(executor_home, run)
    assert f"local run {run.run_id}: still running" in executor.log()  # then SIGKILL


SHOW_GPU = "import os; print('gpu', os.environ['CUDA_VISIBLE_DEVICES'], os.environ.get('ROTA_GPU_SHARE'))"


async def test_a_gpu_share_sees_its_gpu_and_its_fraction(
        nc: Client, executor: ServiceProcess, executor_home: Path) -> None:
    since = await stream_last_seq(nc)
    half = await start_run(nc, spec=command(sys.executable, "-c", SHOW_GPU), gpus=(1,), gpu_share=0.5)
    whole = await start_run(nc, spec=command(sys.executable, "-c", SHOW_GPU), gpus=(4,))
    for run in (half, whole):
        await wait_event(nc, run.run_id, since, "RunFinished")
    assert "gpu 1 0.5" in run_log(executor_home, half)
    assert "gpu 4 None" in run_log(executor_home, whole)


async def test_exit_codes_decide_finished_or_failed(nc: Client, executor: ServiceProcess) -> None:
    since = await stream_last_seq(nc)
    ok = await start_run(nc, spec=command(sys.executable, "-c", "print('done')"))
    bad = await start_run(nc, spec=command(sys.executable, "-c", "import sys; sys.exit(3)"))
    missing = await start_run(nc, spec=command("/nonexistent/rota-test-binary"))
    no_local = await start_run(nc, spec={"sim": {"duration_s": 10}})
    assert (await wait_event(nc, ok.run_id, since, "RunFinished"))["data"]["exit_code"] == 0
    failed = await wait_event(nc, bad.run_id, since, "RunFailed")
    assert failed["data"]["exit_code"] == 3
    failed = await wait_event(nc, missing.run_id, since, "RunFailed")
    assert failed["data"]["exit_code"] == 127 and "cannot start" in failed["data"]["error"]
    failed = await wait_event(nc, no_local.run_id, since, "RunFailed")
    assert "no `local` section" in failed["data"]["error"]


async def stored_row(endpoints: Endpoints, run_id: str) -> dict[str, Any]:
    engine = make_engine(endpoints.database_url)
    try:
        async with engine.connect() as conn:
            row = (await conn.execute(sa.text("SELECT * FROM executor.runs WHERE run_id = :r"),
                                      {"r": run_id})).mappings().one()
    finally:
        await engine.dispose()
    return dict(row)


async def messages_on(nc: Client, stream: str, since: int) -> list[bytes]:
    js = nc.jetstream()
    last = (await js.stream_info(stream)).state.last_seq
    found = []
    for seq in range(since + 1, last + 1):
        try:
            found.append((await js.get_msg(stream, seq)).data or b"")
        except NotFoundError:
            continue  # removed by the stream's limits
    return found


async def test_the_run_token_is_in_the_runs_environment_only(
        nc: Client, endpoints: Endpoints, executor: ServiceProcess, executor_home: Path) -> None:
    since = {stream: await stream_last_seq(nc, stream) for stream in s.STREAM_SUBJECTS}
    run = await start_run(nc, spec=train_plain(), gpus=(4,), node="h100-1")
    ack_since = since[s.STREAM_EVT]
    await wait_event(nc, run.run_id, ack_since, "RunCheckpointed")  # it reported, with its token
    [pid] = await eventually(lambda: pids(endpoints, run.run_id))
    token = psutil.Process(pid).environ()["ROTA_RUN_TOKEN"]
    row = await stored_row(endpoints, run.run_id)
    assert "run_token" not in row
    assert row["token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
    await stop_run(nc, run, "cancelled")
    await wait_event(nc, run.run_id, ack_since, "RunStopped")
    for stream, seq in since.items():
        assert not [b for b in await messages_on(nc, stream, seq) if token.encode() in b], stream
    assert token not in executor.log()


async def test_a_restarted_executor_adopts_live_runs_and_fails_vanished_ones(
        nc: Client, endpoints: Endpoints, executor: ServiceProcess, executor_home: Path) -> None:
    since = await stream_last_seq(nc)
    survivor = await start_run(nc, spec=train_plain(), gpus=(6,))
    victim = await start_run(nc, spec=command(sys.executable, "-c", STUBBORN), gpus=(7,))
    await wait_event(nc, survivor.run_id, since, "RunCheckpointed")
    await eventually(lambda: logged(executor_home, victim, "up"))

    assert executor.process is not None
    executor.process.kill()  # kill -9: no shutdown hooks at all
    await executor.wait_exit()
    for pid in await pids(endpoints, victim.run_id):
        os.killpg(pid, signal.SIGKILL)  # the victim's process dies while nobody watches

    restarted = executor_process(endpoints, executor_home, **LOCAL_ENV)
    restarted.start()
    try:
        await restarted.wait_ready(nc)
        failed = await wait_event(nc, victim.run_id, since, "RunFailed")
        assert failed["data"]["exit_code"] is None
        assert "while the executor was away" in failed["data"]["error"]
        # The survivor kept running, and is still ours: notice, ack, stop.
        notice_id = await send_notice(nc, survivor)
        ack = await wait_event(nc, survivor.run_id, since, "RunCheckpointed",
                               where=lambda e: e["data"]["notice_id"] == notice_id)
        await stop_run(nc, survivor, "preempted")
        stopped = await wait_event(nc, survivor.run_id, since, "RunStopped")
        assert stopped["data"]["checkpoint_uri"] == ack["data"]["checkpoint_uri"]
        assert f"local run {survivor.run_id} adopted after a restart" in restarted.log()
    finally:
        restarted.stop()


async def pids(endpoints: Endpoints, run_id: str) -> list[int]:
    engine = make_engine(endpoints.database_url)
    try:
        async with engine.connect() as conn:
            doc = (await conn.execute(sa.text("SELECT pids FROM executor.runs WHERE run_id = :r"),
                                      {"r": run_id})).scalar_one()
    finally:
        await engine.dispose()
    return [int(p["pid"]) for p in doc]
