"""Playing the scheduler, the executor and the job around a real coordinator.

Every id is fresh per test, and every read filters by those ids: other tests share the
streams. Messages are real envelopes published to JetStream with `Nats-Msg-Id`.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from pydantic import BaseModel
from rota.bus.broker import publish_headers
from rota.contracts import Envelope, Tier, envelope
from rota.contracts import messages as m
from rota.contracts import subjects as s
from rota.contracts.job import WorkerPlacement
from rota.endpoints import Endpoints
from rota.ids import new_id

from tests.integration.harness import ServiceProcess, events, eventually, stream_last_seq

PLANS_SUBJECT = "rota.sys.preemption.plans"


async def publish_event(nc: Client, data: BaseModel, *, job_id: str | None = None,
                        run_id: str | None = None, env: Envelope[Any] | None = None,
                        source: str = "test") -> Envelope[Any]:
    env = env or envelope(data, source=source, job_id=job_id, run_id=run_id)
    await nc.jetstream().publish(s.EVENT_SUBJECTS[env.type], env.to_bytes(),
                                 stream=s.STREAM_EVT, headers=publish_headers(env))
    return env


async def read_stream(nc: Client, stream: str, subject: str, *, since_seq: int = 0
                      ) -> list[dict[str, Any]]:
    """Every message on `subject` in `stream` after sequence `since_seq`."""
    return await events(nc, subject, since_seq=since_seq, stream=stream)


async def last_seq(nc: Client, stream: str) -> int:
    return await stream_last_seq(nc, stream)


@dataclass
class Victim:
    """A running victim: its run, its job, and the token its run environment would hold."""

    tier: Tier = Tier.training
    run_id: str = field(default_factory=new_id)
    job_id: str = field(default_factory=new_id)
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    share: float | None = None
    """A GPU share: `gpus` 0 and this fraction of one GPU in the request."""

    def env(self, endpoints: Endpoints) -> dict[str, str]:
        """The run environment the executor would give it, for `rota.sdk.attach`."""
        return {"ROTA_RUN_ID": self.run_id, "ROTA_JOB_ID": self.job_id,
                "ROTA_RUN_TOKEN": self.token, "ROTA_ATTEMPT": "1",
                "ROTA_NATS_URL": endpoints.nats_url}

    def model(self) -> m.Victim:
        return m.Victim(run_id=self.run_id, job_id=self.job_id, team="ml", queue=self.tier,
                        gpus=0 if self.share else 8, expected_lost_gpu_seconds=120.0,
                        job_name="victim-job", user="alice", resumable=True,
                        gpu_share=self.share)


class Saga:
    """One plan under test: the scheduler's request, the executor's events, the job's acks."""

    def __init__(self, nc: Client, coordinator: ServiceProcess, *victims: Victim) -> None:
        self.nc = nc
        self.coordinator = coordinator
        self.victims = list(victims) or [Victim()]
        self.plan_id = new_id()
        self.preemptor_job_id = new_id()
        self.cmd_since = 0
        self.evt_since = 0

    @property
    def victim(self) -> Victim:
        return self.victims[0]

    async def mark(self) -> None:
        """Where this test's commands and events begin in the shared streams."""
        self.cmd_since = await last_seq(self.nc, s.STREAM_CMD)
        self.evt_since = await last_seq(self.nc, s.STREAM_EVT)

    async def start_runs(self) -> None:
        await self.mark()
        for v in self.victims:
            await self.run_started(v)

    async def run_started(self, v: Victim) -> None:
        await publish_event(self.nc, m.RunStarted(
            run_id=v.run_id, job_id=v.job_id, attempt=1,
            placement=[WorkerPlacement(worker=0, node="node-0", gpus=list(range(8)))],
        ), job_id=v.job_id, run_id=v.run_id, source="executor")

    def request(self) -> m.PreemptionRequested:
        return m.PreemptionRequested(
            plan_id=self.plan_id, preemptor_job_id=self.preemptor_job_id,
            preemptor_queue=Tier.production, preemptor_team="ml",
            victims=[v.model() for v in self.victims], reason="rota:lower-tier",
            message="a production job needs these GPUs", expected_lost_gpu_seconds=120.0,
        )

    async def request_preemption(self) -> Envelope[Any]:
        return await publish_event(self.nc, self.request(), job_id=self.preemptor_job_id,
                                   source="scheduler")

    async def begin(self) -> list[dict[str, Any]]:
        """Runs started, plan requested; returns once every victim has its notice."""
        await self.start_runs()
        await self.request_preemption()
        return [await self.notice(v) for v in self.victims]

    # ---------------------------------------------------------------- reading

    async def control(self, v: Victim | None = None) -> list[dict[str, Any]]:
        return await read_stream(self.nc, s.STREAM_CTL, s.control((v or self.victim).run_id))

    async def notice(self, v: Victim | None = None) -> dict[str, Any]:
        async def first() -> dict[str, Any] | None:
            found = await self.control(v)
            return found[0] if found else None

        found: dict[str, Any] = await eventually(first)
        return found

    async def stops(self, v: Victim | None = None) -> list[dict[str, Any]]:
        run_id = (v or self.victim).run_id
        return [e for e in await read_stream(self.nc, s.STREAM_CMD, s.RUN_STOP,
                                             since_seq=self.cmd_since)
                if e["data"]["run_id"] == run_id]

    async def stop(self, v: Victim | None = None) -> dict[str, Any]:
        async def one() -> list[dict[str, Any]]:
            return await self.stops(v)

        found: list[dict[str, Any]] = await eventually(one)
        return found[0]

    async def completed(self) -> dict[str, Any]:
        async def mine() -> dict[str, Any] | None:
            found = [e for e in await read_stream(self.nc, s.STREAM_EVT,
                                                  s.EVENT_SUBJECTS["PreemptionCompleted"],
                                                  since_seq=self.evt_since)
                     if e["data"]["plan_id"] == self.plan_id]
            return found[0]["data"] if found else None

        found: dict[str, Any] = await eventually(mine)
        return found

    async def plans(self, **query: Any) -> list[dict[str, Any]]:
        """Sagas as the read API reports them (`ListPreemptions` fields as keywords)."""
        request = envelope(m.ListPreemptions(**query), source="test")
        reply = await self.nc.request(PLANS_SUBJECT, request.to_bytes(), timeout=10)
        api = m.ApiReply.model_validate(json.loads(reply.data)["data"])
        assert api.ok, api.error
        assert isinstance(api.result, list)
        return api.result

    async def plan(self) -> dict[str, Any]:
        """This saga as the read API reports it."""
        [plan] = await self.plans(plan_id=self.plan_id)
        assert isinstance(plan, dict)
        return plan

    async def logged(self, *needles: str) -> str:
        """Wait for a log line of the coordinator that has every needle; returns it."""
        async def line() -> str | None:
            return next((ln for ln in self.coordinator.log().splitlines()
                         if all(n in ln for n in needles)), None)

        found: str = await eventually(line)
        return found

    # ---------------------------------------------------------------- writing

    async def ack(self, v: Victim | None = None, *, notice_id: str | None = None,
                  run_id: str | None = None,
                  uri: str = "s3://ckpt/acked", env: Envelope[Any] | None = None
                  ) -> Envelope[Any]:
        v = v or self.victim
        if notice_id is None:
            notice_id = (await self.notice(v))["data"]["notice_id"]
        run = run_id or v.run_id
        data = m.RunCheckpointed(run_id=run, job_id=v.job_id, checkpoint_uri=uri,
                                 notice_id=notice_id)
        # The executor publishes an acknowledgement once the run's token checked out.
        return await publish_event(self.nc, data, job_id=v.job_id, run_id=run, env=env,
                                   source="executor")

    async def run_stopped(self, v: Victim | None = None, *, forced: bool = False,
                          lost: float = 0.0, uri: str | None = None) -> None:
        v = v or self.victim
        await publish_event(self.nc, m.RunStopped(
            run_id=v.run_id, job_id=v.job_id, reason=m.StopReason.preempted, forced=forced,
            checkpoint_uri=uri, lost_gpu_seconds=lost), job_id=v.job_id, run_id=v.run_id,
            source="executor")

    async def run_finished(self, v: Victim | None = None) -> None:
        v = v or self.victim
        await publish_event(self.nc, m.RunFinished(run_id=v.run_id, job_id=v.job_id),
                            job_id=v.job_id, run_id=v.run_id, source="executor")

    async def cancel_preemptor(self) -> None:
        await publish_event(self.nc, m.JobCancelled(
            job_id=self.preemptor_job_id, team="ml", reason="changed my mind", was_running=False,
        ), job_id=self.preemptor_job_id, source="submission")
