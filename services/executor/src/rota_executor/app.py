"""The executor service: runs what was granted, on the backend named by `ROTA_EXECUTOR`.

Durable consumers, each handler thin (the work is in `runs.Executor`):

- `executor-start`       `rota.cmd.run.start`          StartRun: a run starts once
- `executor-stop`        `rota.cmd.run.stop`           StopRun: idempotent
- `executor-checkpoints` `rota.evt.run.checkpointed`   each run's last acknowledged checkpoint
- `executor-control`     `rota.ctl.run.>`              notices, which the simulator answers
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from nats.aio.msg import Msg
from nats.js.errors import NotFoundError
from rota.config import RotaConfig, load_config
from rota.contracts import subjects as s
from rota.endpoints import resolve
from rota.service import RotaService, stop_tasks

from rota_executor.backend import Backend
from rota_executor.credentials import RunMinter
from rota_executor.local import LocalBackend
from rota_executor.runs import Executor
from rota_executor.sim import SimBackend

log = logging.getLogger("rota.executor")

NAME = "executor"
MIGRATIONS = Path(__file__).parent / "migrations"
CHECKPOINTS = s.EVENT_SUBJECTS["RunCheckpointed"]
CONTROL_ALL = "rota.ctl.run.>"
CONSUMERS = (
    (s.STREAM_CMD, "executor-start", s.RUN_START),
    (s.STREAM_CMD, "executor-stop", s.RUN_STOP),
    (s.STREAM_EVT, "executor-checkpoints", CHECKPOINTS),
    (s.STREAM_CTL, "executor-control", CONTROL_ALL),
)


def make_backend(service: RotaService, executor: Executor) -> Backend:
    settings = service.settings
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
    settle_s = service.settings.executor_ack_settle_s

    async def settle() -> None:
        """Wait until `executor-checkpoints` has read every ack already in the stream."""
        js = service.broker.connection.jetstream()
        try:
            last = (await js.get_last_msg(s.STREAM_EVT, CHECKPOINTS)).seq
        except NotFoundError:
            return
        deadline = time.monotonic() + settle_s
        while time.monotonic() < deadline:
            try:
                info = await js.consumer_info(s.STREAM_EVT, "executor-checkpoints")
            except NotFoundError:
                return  # no consumer, nothing it could still be reading
            if info.ack_floor.stream_seq >= last or (
                    info.num_pending == 0 and info.num_ack_pending == 0):
                return
            await asyncio.sleep(0.05)
        log.warning("checkpoint acks not all read after %.1f s; deciding without them", settle_s)

    executor = Executor(service, config.expanded_nodes(), settle)
    background: list[asyncio.Task[None]] = []

    @service.js_subscriber(s.RUN_START, stream=s.STREAM_CMD, durable="executor-start")
    async def start_run(msg: Msg) -> None:
        """StartRun: record the run and `RunStarted`, then launch it."""
        await executor.start(msg.data)

    @service.js_subscriber(s.RUN_STOP, stream=s.STREAM_CMD, durable="executor-stop")
    async def stop_run(msg: Msg) -> None:
        """StopRun: SIGTERM then SIGKILL (local), or end the simulation; then `RunStopped`."""
        await executor.stop(msg.data)

    @service.js_subscriber(CHECKPOINTS, stream=s.STREAM_EVT, durable="executor-checkpoints",
                           batch_size=128)
    async def run_checkpointed(msg: Msg) -> None:
        """RunCheckpointed: the run's last acknowledged checkpoint, for `RunStopped`."""
        await executor.checkpoint_seen(msg.data)

    @service.js_subscriber(CONTROL_ALL, stream=s.STREAM_CTL, durable="executor-control")
    async def run_notice(msg: Msg) -> None:
        """PreemptionNotice: the simulator saves and acknowledges like a real job."""
        await executor.notice_seen(msg.data)

    @service.app.on_startup
    async def recover() -> None:
        # After the service's own startup (migrations, engine, NATS), before the subscribers:
        # live runs are adopted before any StopRun for them can arrive.
        executor.backend = make_backend(service, executor)
        await executor.recover()

    @service.app.after_startup
    async def run_backend() -> None:
        assert executor.backend is not None
        executor.consuming = True
        background.append(asyncio.create_task(executor.backend.run(), name="executor-backend"))
        log.info("executor: %s backend", executor.backend.name)

    @service.app.on_shutdown
    async def stop_backend() -> None:
        await stop_tasks(background)
        if executor.backend is not None:
            await executor.backend.close()

    return service
