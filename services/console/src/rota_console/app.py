"""The console's web app: Starlette, Jinja2 and htmx, reading through the NATS API only."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import nats
from nats.aio.client import Client
from rota.bus.options import connect_options
from rota.clock import Clock, SystemClock
from rota.config import RotaConfig, load_config
from rota.endpoints import resolve
from rota.settings import Settings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from rota_console.access import Trust
from rota_console.fairshare import UsageHistory, usage_by_team
from rota_console.feed import Relay
from rota_console.guard import Hardening
from rota_console.reader import PLATFORM, ApiFailure, Reader, Viewer
from rota_console.sessions import LoginLimiter, SessionBook
from rota_console.settings import ConsoleSettings

log = logging.getLogger("rota.console")
HERE = Path(__file__).parent
SESSION_COOKIE = "rota_console"


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


def build(settings: ConsoleSettings | None = None, rota: Settings | None = None,
          clock: Clock | None = None) -> Starlette:
    from rota_console import routes

    settings = settings or ConsoleSettings()
    rota = rota or Settings()
    config = load_config(rota.config)
    console = Console(settings, rota, config, UsageHistory(
        half_life_s=config.policy.fairshare_half_life_s, points=settings.history_points),
        clock=clock or SystemClock(), trust=Trust.of(rota))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await console.start()
        try:
            yield
        finally:
            await console.stop()

    secret = (settings.session_secret.get_secret_value() if settings.session_secret
              else secrets.token_urlsafe(32))
    app = Starlette(
        routes=[*routes.ROUTES,
                Mount("/static", StaticFiles(directory=HERE / "static"), name="static")],
        middleware=[Middleware(Hardening, allowed_origins=settings.allowed_origins),
                    Middleware(SessionMiddleware, secret_key=secret, session_cookie=SESSION_COOKIE,
                               max_age=int(settings.session_max_age_s), same_site="strict",
                               https_only=settings.secure_cookies)],
        lifespan=lifespan,
    )
    app.state.console = console
    return app


__all__ = ["Console", "Route", "build"]
