"""The coordinator as a real process, one test per edge case of checkpoint-acknowledged
preemption. Sync points are messages and log lines, never sleeps; no timing is asserted."""

from __future__ import annotations

import asyncio
import json

from nats.aio.client import Client
from rota import sdk
from rota.contracts import Tier, envelope
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.endpoints import Endpoints

from tests.integration.harness import ServiceProcess
from tests.integration.preemption.helpers import PLANS_SUBJECT, Saga, Victim, read_stream


async def test_the_job_is_noticed_through_the_sdk_and_its_ack_completes_the_saga(
    nc: Client, coordinator: ServiceProcess, endpoints: Endpoints
) -> None:
    saga = Saga(nc, coordinator)
    await saga.start_runs()
    run = await asyncio.to_thread(sdk.attach, saga.victim.env(endpoints))
    try:
        await saga.request_preemption()
        assert await asyncio.to_thread(run.wait_for_preemption, 15)
        notice = run.notice
        assert notice is not None and notice.plan_id == saga.plan_id
        assert notice.grace_s == 300  # the training tier's grace from the test rota.yaml
        assert notice.ack_subject == s.run_checkpoint(saga.victim.run_id)
    finally:
        await asyncio.to_thread(run.close)
    # The job's report goes to the executor (tests/integration/executor), which publishes the
    # verified acknowledgement: played here as the executor would send it.
    await saga.ack(notice_id=notice.notice_id, uri="file:///ckpt/step-42")

    stop = await saga.stop()
    assert stop["data"] == {"run_id": saga.victim.run_id, "job_id": saga.victim.job_id,
                            "reason": "preempted", "forced": False, "plan_id": saga.plan_id}
    noticed = [e for e in await read_stream(nc, s.STREAM_EVT,
                                            s.EVENT_SUBJECTS["PreemptionNoticed"],
                                            since_seq=saga.evt_since)
               if e["data"]["plan_id"] == saga.plan_id]
    assert [e["data"]["job_name"] for e in noticed] == ["victim-job"]
    await saga.run_stopped(lost=0.0, uri="file:///ckpt/step-42")
    done = await saga.completed()
    assert done["aborted"] is False
    assert [(v["outcome"], v["checkpoint_uri"]) for v in done["victims"]] == [
        ("acked", "file:///ckpt/step-42")]
    plan = await saga.plan()
    assert plan["state"] == "completed"
    assert plan["victims"][0]["state"] == "done" and plan["victims"][0]["acked_at"]


async def test_a_victim_that_finishes_by_itself_during_the_grace_is_not_stopped(
    nc: Client, coordinator: ServiceProcess
) -> None:
    saga = Saga(nc, coordinator)
    await saga.begin()
    await saga.run_finished()
    done = await saga.completed()
    assert [v["outcome"] for v in done["victims"]] == ["finished"]
    # The completion commits after any StopRun would have, and the outbox keeps that order.
    assert await saga.stops() == []


async def test_a_cancelled_preemptor_aborts_the_plan_and_withdraws_the_notice(
    nc: Client, coordinator: ServiceProcess
) -> None:
    saga = Saga(nc, coordinator)
    [notice] = await saga.begin()
    await saga.cancel_preemptor()
    done = await saga.completed()
    assert done["aborted"] is True
    assert [v["outcome"] for v in done["victims"]] == ["aborted"]
    first, withdrawn = await saga.control()
    assert first["data"]["action"] == "checkpoint_and_stop"
    assert withdrawn["data"]["action"] == "withdrawn"
    assert withdrawn["data"]["notice_id"] == notice["data"]["notice_id"]
    assert await saga.stops() == []  # the victim keeps running
    assert (await saga.plan())["state"] == "aborted"
    # The read API finds the plan by either job, and not among the open ones.
    for job_id in (saga.preemptor_job_id, saga.victim.job_id):
        assert [p["plan_id"] for p in await saga.plans(job_id=job_id)] == [saga.plan_id]
    assert await saga.plans(job_id=saga.victim.job_id, open=True) == []


async def test_duplicate_acks_send_one_stop(nc: Client, coordinator: ServiceProcess) -> None:
    saga = Saga(nc, coordinator)
    await saga.begin()
    first = await saga.ack()
    await saga.ack(uri="s3://ckpt/again")                 # a second ack, a new envelope
    await saga.ack(env=first)                               # the same envelope again
    await saga.logged("a duplicate", saga.victim.run_id)
    await saga.run_stopped()
    done = await saga.completed()
    assert [(v["outcome"], v["checkpoint_uri"]) for v in done["victims"]] == [
        ("acked", "s3://ckpt/acked")]
    assert len(await saga.stops()) == 1


async def test_an_ack_after_the_deadline_is_ignored_and_the_stop_stays_forced(
    nc: Client, coordinator: ServiceProcess
) -> None:
    saga = Saga(nc, coordinator, Victim(Tier.experiment))  # 2 s grace
    await saga.begin()
    stop = await saga.stop()
    assert stop["data"]["forced"] is True
    await saga.ack()
    await saga.logged("after the deadline", saga.victim.run_id)
    await saga.run_stopped(forced=True, lost=1234.0)
    done = await saga.completed()
    assert [(v["outcome"], v["lost_gpu_seconds"]) for v in done["victims"]] == [
        ("forced", 1234.0)]
    assert len(await saga.stops()) == 1


async def test_an_ack_from_a_stale_run_of_the_same_job_is_ignored(
    nc: Client, coordinator: ServiceProcess
) -> None:
    victim = Victim()
    stale = Victim(job_id=victim.job_id)  # an older run of the same job
    saga = Saga(nc, coordinator, victim)
    await saga.start_runs()
    await saga.run_started(stale)
    await saga.request_preemption()
    notice = await saga.notice()
    await saga.ack(victim, run_id=stale.run_id, notice_id=notice["data"]["notice_id"])
    await saga.logged("stale run", stale.run_id)
    assert (await saga.plan())["victims"][0]["state"] == "noticed"
    await saga.ack()
    stop = await saga.stop()
    assert (stop["data"]["run_id"], stop["data"]["forced"]) == (victim.run_id, False)
    assert await saga.stops(stale) == []


async def test_a_stop_reported_without_an_ack_is_forced_with_its_lost_work(
    nc: Client, coordinator: ServiceProcess
) -> None:
    saga = Saga(nc, coordinator)
    await saga.begin()
    await saga.run_stopped(forced=True, lost=777.0)
    done = await saga.completed()
    assert [(v["outcome"], v["lost_gpu_seconds"]) for v in done["victims"]] == [
        ("forced", 777.0)]
    assert await saga.stops() == []
    assert (await saga.plan())["victims"][0]["lost_gpu_seconds"] == 777.0


async def test_a_redelivered_plan_opens_one_saga(nc: Client, coordinator: ServiceProcess) -> None:
    saga = Saga(nc, coordinator)
    await saga.start_runs()
    await saga.request_preemption()
    await saga.request_preemption()  # the same plan, in a new envelope
    await saga.notice()
    await saga.run_finished()
    await saga.completed()
    assert len(await saga.control()) == 1


async def test_the_read_api_rejects_an_unknown_field(nc: Client, coordinator: ServiceProcess
                                                      ) -> None:
    body = json.loads(envelope(m.ListPreemptions(), source="test").to_bytes())
    body["data"]["colour"] = "blue"
    reply = await nc.request(PLANS_SUBJECT, json.dumps(body).encode(), timeout=10)
    api = m.ApiReply.model_validate(json.loads(reply.data)["data"])
    assert not api.ok and api.error is not None
    assert (api.error.code, api.error.field) == ("INVALID_FIELD", "data.colour")


async def test_the_human_notice_is_published_before_the_stop_and_no_notifier_is_waited_for(
    nc: Client, coordinator: ServiceProcess
) -> None:
    """DECISIONS 38: the human notice is best-effort. What is promised is its order on the
    bus (PreemptionNoticed is committed before any StopRun of the victim) and that no notifier
    is on the path: none runs here, and the acknowledged stop still goes out at once."""
    saga = Saga(nc, coordinator)
    await saga.begin()
    await saga.ack(uri="file:///ckpt/step-7")
    stop = await saga.stop()
    [noticed] = [e for e in await read_stream(nc, s.STREAM_EVT,
                                              s.EVENT_SUBJECTS["PreemptionNoticed"],
                                              since_seq=saga.evt_since)
                 if e["data"]["plan_id"] == saga.plan_id]
    assert noticed["data"]["run_id"] == stop["data"]["run_id"] == saga.victim.run_id
    assert noticed["occurred_at"] <= stop["occurred_at"]
    assert stop["data"]["forced"] is False


async def test_a_share_victim_is_listed_with_its_fraction(
    nc: Client, coordinator: ServiceProcess
) -> None:
    saga = Saga(nc, coordinator, Victim(share=0.5))
    await saga.begin()
    await saga.run_finished()
    assert [v["outcome"] for v in (await saga.completed())["victims"]] == ["finished"]
    [victim] = (await saga.plan())["victims"]
    assert (victim["gpus"], victim["gpu_share"]) == (0, 0.5)
