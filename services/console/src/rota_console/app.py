"""The console's web app: Starlette, Jinja2 and htmx, reading through the NATS API only."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

from rota.clock import Clock, SystemClock
from rota.config import load_config
from rota.settings import Settings
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from rota_console import routes
from rota_console.access import Trust
from rota_console.console import Console
from rota_console.fairshare import UsageHistory
from rota_console.guard import Hardening
from rota_console.settings import ConsoleSettings

HERE = Path(__file__).parent
SESSION_COOKIE = "rota_console"


def build(settings: ConsoleSettings | None = None, rota: Settings | None = None,
          clock: Clock | None = None) -> Starlette:
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
