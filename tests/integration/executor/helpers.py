"""Driving the executor over real JetStream: commands in, this test's own run events out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from nats.aio.client import Client
from rota.contracts import envelope
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.contracts.job import JobSpec, WorkerPlacement
from rota.ids import new_id

from tests.builders import spec_doc
from tests.integration.harness import events, eventually

Event = dict[str, Any]


class RunRef(Protocol):
    """A StartRun, or anything else naming a run of a job."""

    @property
    def run_id(self) -> str: ...

    @property
    def job_id(self) -> str: ...


async def start_run(
    nc: Client, *, spec: dict[str, Any], gpus: tuple[int, ...] = (0, 1), node: str = "h100-0",
    run_id: str | None = None, job_id: str | None = None, attempt: int = 1,
    resume_from: str | None = None, copies: int = 1, gpu_share: float | None = None,
) -> m.StartRun:
    """Publish a StartRun; `copies` > 1 sends it again under new message ids (a redelivery
    JetStream cannot drop)."""
    command = m.StartRun(
        run_id=run_id or new_id(), job_id=job_id or new_id(), attempt=attempt,
        spec=JobSpec.model_validate(spec_doc(gpus_per_worker=len(gpus), gpu_share=gpu_share, **spec)),
        placement=[WorkerPlacement(worker=0, node=node, gpus=list(gpus), gpu_share=gpu_share)],
        resume_from=resume_from,
    )
    for _ in range(copies):
        env = envelope(command, source="scheduler", job_id=command.job_id, run_id=command.run_id)
        await nc.jetstream().publish(s.RUN_START, env.to_bytes(), stream=s.STREAM_CMD,
                                     headers={"Nats-Msg-Id": env.id})
    return command


async def stop_run(nc: Client, run: m.StartRun, reason: str = "preempted",
                   forced: bool = False) -> None:
    command = m.StopRun(run_id=run.run_id, job_id=run.job_id, reason=m.StopReason(reason),
                        forced=forced)
    env = envelope(command, source="preemption", job_id=run.job_id, run_id=run.run_id)
    await nc.jetstream().publish(s.RUN_STOP, env.to_bytes(), stream=s.STREAM_CMD,
                                 headers={"Nats-Msg-Id": env.id})


async def send_notice(nc: Client, run: RunRef, *, action: str = "checkpoint_and_stop",
                      notice_id: str | None = None) -> str:
    notice_id = notice_id or new_id()
    notice = m.PreemptionNotice(
        notice_id=notice_id, plan_id=new_id(), run_id=run.run_id, job_id=run.job_id,
        action=action,  # type: ignore[arg-type,unused-ignore]
        deadline=datetime.now(UTC) + timedelta(seconds=300), grace_s=300,
        ack_subject=s.run_checkpoint(run.run_id), reason="reclaimed by production",
    )
    env = envelope(notice, source="preemption", job_id=run.job_id, run_id=run.run_id)
    await nc.jetstream().publish(s.control(run.run_id), env.to_bytes(), stream=s.STREAM_CTL,
                                 headers={"Nats-Msg-Id": env.id})
    return notice_id


async def run_events(nc: Client, run_id: str, since: int) -> list[Event]:
    return [e for e in await events(nc, "rota.evt.run.>", since_seq=since)
            if e["run_id"] == run_id]


async def wait_event(nc: Client, run_id: str, since: int, type_: str, *,
                     timeout: float = 20.0, where: Any = None) -> Event:
    """The first event of `type_` for this run (matching `where`, if given)."""

    async def found() -> Event | None:
        for event in await run_events(nc, run_id, since):
            if event["type"] == type_ and (where is None or where(event)):
                return event
        return None

    result: Event = await eventually(found, timeout=timeout, interval=0.3)
    return result


def seconds_between(earlier: Event, later: Event) -> float:
    parse = datetime.fromisoformat
    return (parse(later["occurred_at"]) - parse(earlier["occurred_at"])).total_seconds()
