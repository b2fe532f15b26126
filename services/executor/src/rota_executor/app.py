"""The executor service: runs what was granted, on the backend named by `ROTA_EXECUTOR`.

Consumers, each handler thin (the work is in `runs.Executor`):

- `executor-start`       `rota.cmd.run.start`          StartRun: a run starts once; a pull
                                                        batch per transaction
- `executor-stop`        `rota.cmd.run.stop`           StopRun: idempotent
- `executor-checkpoints` `rota.run.checkpoint.*`       a run's reports: core request/reply, on no
                                                        stream, since they carry its token
- `executor-control`     `rota.ctl.run.>`              notices, which the simulator answers

At its start and every `ROTA_EXECUTOR_ANNOUNCE_INTERVAL_S` it announces which jobs its backend
runs (`ExecutorAnnounced`): the scheduler holds a job no running executor can run.

With several replicas (`ROTA_REPLICAS`), start, stop and control are partitioned by run id
(`rota.bus.partition`): a run's stop and notices reach the replica that started it, which is
the one that adopts it after a restart.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from faststream.nats.annotations import NatsMessage
from nats.aio.msg import Msg
from rota.bus.partition import by_run
from rota.config import RotaConfig, load_config
from rota.contracts import subjects as s
from rota.endpoints import resolve
from rota.k8s.api import kube_client
from rota.service import RotaService, stop_tasks

from rota_executor.backend import Backend
from rota_executor.credentials import RunMinter
from rota_executor.kube import KubeBackend
from rota_executor.local import LocalBackend
from rota_executor.runs import Executor
from rota_executor.runs_namespace import check_runs_namespace
from rota_executor.sim import SimBackend

log = logging.getLogger("rota.executor")

NAME = "executor"
MIGRATIONS = Path(__file__).parent / "migrations"
CONTROL_ALL = "rota.ctl.run.>"
START_BATCH = 64
"""StartRuns recorded per transaction: what a scheduling cycle sends at a time, about."""
CONSUMERS = (
    (s.STREAM_CMD, "executor-start", s.RUN_START),
    (s.STREAM_CMD, "executor-stop", s.RUN_STOP),
    (s.STREAM_CTL, "executor-control", CONTROL_ALL),
)


async def make_backend(service: RotaService, executor: Executor) -> Backend:
    settings = service.settings
    if settings.executor == "kubernetes":
        check_runs_namespace(settings.kube_namespace, in_cluster=settings.kubeconfig is None)
        nats_url = settings.kube_pods_nats_url or settings.nats_url or resolve(
            settings, need_database=False).nats_url
        return KubeBackend(
            executor, service.clock, await kube_client(settings.kubeconfig, settings.kube_context),
            namespace=settings.kube_namespace, nats_url=nats_url,
            gpu_resource=settings.kube_gpu_resource,
            start_timeout_s=settings.kube_start_timeout_s, grace_s=settings.kill_grace_s,
            checkpoint_dir=settings.kube_checkpoint_dir,
            poll_s=settings.executor_poll_interval_s,
            minter=RunMinter.from_settings(settings, settings.home.resolve() / "runs" / "creds"),
            config_nodes=executor.nodes, drain_deadline_s=settings.kube_drain_deadline_s,
            node_lost_grace_s=settings.node_lost_grace_s,
        )
    if settings.executor == "local":
        nats_url = settings.nats_url or resolve(settings, need_database=False).nats_url
        return LocalBackend(
            executor, service.clock, home=settings.home, nats_url=nats_url,
            kill_grace_s=settings.kill_grace_s, poll_interval_s=settings.executor_poll_interval_s,
            minter=RunMinter.from_settings(settings, settings.home.resolve() / "runs" / "creds"),
        )
    return SimBackend(executor, service.clock, speed=settings.sim_speed,
                      tick_s=settings.sim_tick_s)


def build(service: RotaService | None = None, config: RotaConfig | None = None) -> RotaService:
    service = service or RotaService(NAME, migrations=MIGRATIONS)
    config = config or load_config(service.settings.config)

    executor = Executor(service, config.expanded_nodes())
    background: list[asyncio.Task[None]] = []

    @service.js_batch_subscriber(s.RUN_START, stream=s.STREAM_CMD, durable="executor-start",
                                 partition_key=by_run, batch_size=START_BATCH)
    async def start_runs(batch: list[Msg]) -> None:
        """StartRun: record a pull batch's runs and their `RunStarted` in one transaction,
        then launch them."""
        await executor.start_batch([(msg.data, msg.headers) for msg in batch])

    @service.js_subscriber(s.RUN_STOP, stream=s.STREAM_CMD, durable="executor-stop",
                           partition_key=by_run)
    async def stop_run(msg: Msg) -> None:
        """StopRun: SIGTERM then SIGKILL (local), or end the simulation; then `RunStopped`."""
        await executor.stop(msg.data)

    @service.broker.subscriber(s.RUN_CHECKPOINT_ALL, queue="executor-checkpoints")
    async def report_checkpoint(msg: NatsMessage) -> bytes:
        """ReportCheckpoint from a run: checked against its token hash, recorded, published
        as `RunCheckpointed`, then answered."""
        return await executor.report_checkpoint(msg.body)

    @service.js_subscriber(CONTROL_ALL, stream=s.STREAM_CTL, durable="executor-control",
                           partition_key=by_run)
    async def run_notice(msg: Msg) -> None:
        """PreemptionNotice: the simulator saves and acknowledges like a real job."""
        await executor.notice_seen(msg.data)

    @service.app.on_startup
    async def recover() -> None:
        # After the service's own startup (migrations, engine, NATS), before the subscribers:
        # live runs are adopted before any StopRun for them can arrive.
        executor.backend = await make_backend(service, executor)
        await executor.recover()
        # Before any StartRun is read: the scheduler holds what this backend cannot run.
        await executor.announce()

    @service.app.after_startup
    async def run_backend() -> None:
        assert executor.backend is not None
        background.append(asyncio.create_task(executor.backend.run(), name="executor-backend"))
        background.append(asyncio.create_task(executor.keep_announcing(),
                                              name="executor-announce"))
        log.info("executor: %s backend", executor.backend.name)

    @service.app.on_shutdown
    async def stop_backend() -> None:
        await stop_tasks(background)
        if executor.backend is not None:
            await executor.backend.close()

    return service
