"""The executor's sim backend against real NATS JetStream and PostgreSQL, at 100x speed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from rota.contracts import envelope, parse
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.endpoints import Endpoints
from rota.ids import new_id

from tests.integration.executor.conftest import executor_process, started
from tests.integration.executor.helpers import (
    run_events,
    send_notice,
    start_run,
    stop_run,
    wait_event,
)
from tests.integration.harness import ServiceProcess, events, eventually, stream_last_seq

SPEED = 100.0


@pytest.fixture(scope="module")
async def executor(endpoints: Endpoints, nc: Client, executor_home: Path
                   ) -> AsyncIterator[ServiceProcess]:
    async for service in started(endpoints, nc, executor_home, ROTA_EXECUTOR="sim",
                                 ROTA_SIM_SPEED=str(SPEED), ROTA_SIM_TICK_S="0.05",
                                 ROTA_EXECUTOR_ANNOUNCE_INTERVAL_S="0.5"):
        yield service


async def test_it_announces_that_it_runs_every_job_and_again_while_it_runs(
        nc: Client, executor: ServiceProcess) -> None:
    """`ExecutorAnnounced` at its start and every interval, valid for three: the scheduler
    holds no job for the simulator, which runs any."""

    async def announced() -> list[dict[str, Any]]:
        """This process's announcements, once there are two (the start's, then one more)."""
        found = [e for e in await events(nc, s.EVENT_SUBJECTS["ExecutorAnnounced"])
                 if e["data"]["backend"] == "sim"]
        mine = [e for e in found if found and e["data"]["instance"] == found[-1]["data"]["instance"]]
        return mine if len(mine) > 1 else []

    found = await eventually(announced)
    assert {e["source"] for e in found} == {"executor"}
    latest = found[-1]["data"]
    assert latest["needs"] is None and latest["valid_for_s"] == 1.5
    assert (latest["replica"], latest["replicas"]) == (0, 1)
    assert len({e["id"] for e in found}) == len(found)  # each its own Nats-Msg-Id


def checkpoints(evts: list[dict[str, object]]) -> list[dict[str, object]]:
    return [e["data"] for e in evts if e["type"] == "RunCheckpointed"]  # type: ignore[misc]


async def test_a_run_checkpoints_periodically_then_finishes(nc: Client, executor: ServiceProcess) -> None:
    since = await stream_last_seq(nc)
    run = await start_run(nc, spec={"sim": {"duration_s": 300, "checkpoint_interval_s": 100}})
    started_ = await wait_event(nc, run.run_id, since, "RunStarted")
    assert "token_sha256" not in started_["data"]
    assert started_["data"]["attempt"] == 1 and started_["source"] == "executor"
    await wait_event(nc, run.run_id, since, "RunFinished")
    evts = await run_events(nc, run.run_id, since)
    assert [e["type"] for e in evts] == ["RunStarted", "RunCheckpointed", "RunCheckpointed",
                                         "RunFinished"]
    assert [c["checkpoint_uri"] for c in checkpoints(evts)] == [
        f"sim://{run.job_id}/100", f"sim://{run.job_id}/200"]
    for event in evts[1:3]:  # the executor made them: no token to show
        assert event["source"] == "executor"
        assert "run_token" not in event["data"] and event["data"]["notice_id"] is None


async def test_a_gpu_share_runs_to_its_end(nc: Client, executor: ServiceProcess) -> None:
    since = await stream_last_seq(nc)
    run = await start_run(nc, spec={"sim": {"duration_s": 50}}, gpus=(3,), gpu_share=0.25)
    started = await wait_event(nc, run.run_id, since, "RunStarted")
    assert started["data"]["placement"] == [{"worker": 0, "node": "h100-0", "gpus": [3], "gpu_share": 0.25}]
    await wait_event(nc, run.run_id, since, "RunFinished")


async def test_a_notice_is_saved_acknowledged_then_stopped(
        nc: Client, executor: ServiceProcess) -> None:
    since = await stream_last_seq(nc)
    run = await start_run(nc, spec={"sim": {"duration_s": 100_000, "checkpoint_interval_s": 100,
                                            "checkpoint_save_s": 50}})
    await wait_event(nc, run.run_id, since, "RunCheckpointed")  # it has made progress
    notice_id = await send_notice(nc, run)
    ack = await wait_event(nc, run.run_id, since, "RunCheckpointed",
                           where=lambda e: e["data"]["notice_id"] == notice_id)
    assert ack["source"] == "executor" and "run_token" not in ack["data"]
    assert ack["data"]["checkpoint_uri"] == f"sim://{run.job_id}/{ack['data']['progress_s']:g}"
    await stop_run(nc, run, "preempted")
    stopped = await wait_event(nc, run.run_id, since, "RunStopped")
    assert stopped["data"]["reason"] == "preempted" and stopped["data"]["forced"] is False
    assert stopped["data"]["checkpoint_uri"] == ack["data"]["checkpoint_uri"]
    # Saved at the ack, and no progress after it: nothing lost while it waited for its stop.
    assert stopped["data"]["lost_gpu_seconds"] == 0
    # A second stop of the same run does nothing.
    await stop_run(nc, run, "preempted")
    await eventually(lambda: _logged(executor, f"StopRun for run {run.run_id}: it is stopped"))
    assert [e["type"] for e in await run_events(nc, run.run_id, since)].count("RunStopped") == 1


async def test_a_resumed_run_continues_from_its_checkpoint(nc: Client, executor: ServiceProcess) -> None:
    since = await stream_last_seq(nc)
    job_id = new_id()
    resume = f"sim://{job_id}/500"
    run = await start_run(nc, job_id=job_id, attempt=2, resume_from=resume,
                          spec={"sim": {"duration_s": 800, "checkpoint_interval_s": 100}})
    started_ = await wait_event(nc, run.run_id, since, "RunStarted")
    assert started_["data"]["resumed_from"] == resume and started_["data"]["attempt"] == 2
    await wait_event(nc, run.run_id, since, "RunFinished")
    evts = await run_events(nc, run.run_id, since)
    assert [c["checkpoint_uri"] for c in checkpoints(evts)] == [
        f"sim://{job_id}/600", f"sim://{job_id}/700"]


async def test_a_run_fails_at_fail_after(nc: Client, executor: ServiceProcess) -> None:
    since = await stream_last_seq(nc)
    run = await start_run(nc, spec={"resumable": False,
                                    "sim": {"duration_s": 1000, "fail_after_s": 50}})
    failed = await wait_event(nc, run.run_id, since, "RunFailed")
    assert failed["data"]["exit_code"] == 1
    assert "simulated failure at 50 s" in failed["data"]["error"]


async def test_a_duplicate_start_runs_once_and_an_unknown_stop_only_logs(
        nc: Client, executor: ServiceProcess) -> None:
    since = await stream_last_seq(nc)
    run = await start_run(nc, copies=3, spec={"sim": {"duration_s": 100}})
    await wait_event(nc, run.run_id, since, "RunFinished")
    await eventually(lambda: _logged(executor, f"duplicate StartRun for run {run.run_id}"))
    types = [e["type"] for e in await run_events(nc, run.run_id, since)]
    assert types == ["RunStarted", "RunFinished"]
    unknown = run.model_copy(update={"run_id": new_id()})
    await stop_run(nc, unknown, "cancelled")
    await eventually(lambda: _logged(executor, f"StopRun for unknown run {unknown.run_id}"))


async def test_a_placement_outside_the_cluster_fails_the_run(nc: Client, executor: ServiceProcess) -> None:
    since = await stream_last_seq(nc)
    run = await start_run(nc, node="h100-99", spec={"sim": {"duration_s": 100}})
    failed = await wait_event(nc, run.run_id, since, "RunFailed")
    assert "no node 'h100-99'" in failed["data"]["error"]
    assert [e["type"] for e in await run_events(nc, run.run_id, since)] == ["RunFailed"]


async def test_a_checkpoint_report_without_the_runs_token_is_refused_and_not_published(
        nc: Client, executor: ServiceProcess) -> None:
    since = await stream_last_seq(nc)
    run = await start_run(nc, spec={"sim": {"duration_s": 100_000}})
    await wait_event(nc, run.run_id, since, "RunStarted")
    guess = "not-the-token-" + "x" * 20

    async def report(run_id: str, job_id: str, token: str) -> m.ApiReply:
        request = m.ReportCheckpoint(run_id=run_id, job_id=job_id,
                                     checkpoint_uri="file:///mine", run_token=token,
                                     notice_id=new_id())
        body = envelope(request, source=f"run/{run_id}", job_id=job_id, run_id=run_id)
        msg = await nc.request(s.run_checkpoint(run_id), body.to_bytes(), timeout=10)
        return parse(msg.data, m.ApiReply, max_bytes=65536).data

    for reply in (await report(run.run_id, run.job_id, guess),
                  await report(new_id(), run.job_id, guess)):  # an unknown run: the same
        assert not reply.ok and reply.error is not None
        assert (reply.error.code, reply.error.field) == ("UNAUTHORISED", "run_token")
    malformed = await nc.request(s.run_checkpoint(run.run_id), b'{"type": "ReportCheckpoint"}',
                                 timeout=10)
    assert not parse(malformed.data, m.ApiReply, max_bytes=65536).data.ok
    await stop_run(nc, run, "cancelled")
    await wait_event(nc, run.run_id, since, "RunStopped")
    assert "RunCheckpointed" not in [e["type"] for e in await run_events(nc, run.run_id, since)]
    assert guess not in executor.log()


async def _logged(service: ServiceProcess, text: str) -> bool:
    return text in service.log()


async def test_a_sim_run_survives_a_kill_9_of_the_executor(
        nc: Client, endpoints: Endpoints, executor: ServiceProcess, executor_home: Path) -> None:
    """Last in this module: it replaces the module's executor with a restarted one."""
    since = await stream_last_seq(nc)
    run = await start_run(nc, spec={"sim": {"duration_s": 500, "checkpoint_interval_s": 100}})
    await wait_event(nc, run.run_id, since, "RunCheckpointed")
    assert executor.process is not None
    executor.process.kill()
    await executor.wait_exit()
    restarted = executor_process(endpoints, executor_home, ROTA_EXECUTOR="sim",
                                 ROTA_SIM_SPEED=str(SPEED), ROTA_SIM_TICK_S="0.05")
    restarted.start()
    try:
        await restarted.wait_ready(nc)
        await wait_event(nc, run.run_id, since, "RunFinished")
        evts = await run_events(nc, run.run_id, since)
        uris = [c["checkpoint_uri"] for c in checkpoints(evts)]
        assert uris == sorted(set(uris), key=uris.index)  # none twice, in order
        assert [e["type"] for e in evts].count("RunStarted") == 1
    finally:
        restarted.stop()
