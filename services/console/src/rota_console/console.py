"""The console's state: everything a request handler needs, one per app. Apart from the app
(`rota_console.app`, the wiring) so that the routes, which the app mounts, can take it in
without importing the app."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

import nats
from nats.aio.client import Client
from rota.bus.options import connect_options
from rota.clock import Clock, SystemClock
from rota.config import RotaConfig
from rota.endpoints import resolve
from rota.settings import Settings

from rota_console.access import Trust
from rota_console.fairshare import UsageHistory, usage_by_team
from rota_console.feed import Relay
from rota_console.reader import PLATFORM, ApiFailure, Reader, Viewer
from rota_console.sessions import LoginLimiter, SessionBook
from rota_console.settings import ConsoleSettings

log = logging.getLogger("rota.console")


@dataclass
class Console:
    """Everything a request handler needs; one per app."""

    settings: ConsoleSettings
    rota: Settings
    config: RotaConfig
    history: UsageHistory
    clock: Clock = field(default_factory=SystemClock)
    trust: Trust = field(default_factory=Trust)
    relay: Relay = field(default_factory=Relay)
    sessions: SessionBook = field(init=False)
    logins: LoginLimiter = field(init=False)
    nc: Client | None = None
    reader: Reader | None = None
    nats_url: str = ""
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.sessions = SessionBook(self.clock)
        self.logins = LoginLimiter(self.clock, attempts=self.settings.login_attempts_per_minute)

    def api(self) -> Reader:
        if self.reader is None:
            raise ApiFailure("UNAVAILABLE", "the console is not connected to NATS")
        return self.reader

    async def start(self) -> None:
        self.nats_url = resolve(self.rota, need_database=False).nats_url
        # Reconnects for ever: the console outlives a NATS restart like the services do.
        self.nc = await nats.connect(self.nats_url, connect_timeout=5, max_reconnect_attempts=-1,
                                     **connect_options(self.rota))
        self.reader = Reader(self.nc, timeout_s=self.rota.request_timeout_s)
        await self.nc.subscribe("rota.feed.>", cb=self.relay.on_message)
        self.tasks.append(asyncio.create_task(self._sample_forever()))

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await self.nc.close()

    async def sample_once(self) -> None:
        summary = await self.api().queues(Viewer(PLATFORM))
        self.history.record(datetime.now(UTC), usage_by_team(summary))

    async def _sample_forever(self) -> None:
        while True:
            try:
                await self.sample_once()
            except ApiFailure as exc:
                log.warning("fair-share sample skipped: %s", exc.message)
            await asyncio.sleep(self.settings.sample_interval_s)
