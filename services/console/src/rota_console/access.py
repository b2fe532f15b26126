"""Who is looking: a team logged in with its credentials, or named by the platform's proxy.

Login proves possession of a team's `.creds` (or the admin's): the console connects to NATS
with them once, so the server checks the JWT's signature and the seed, and then forgets them.
What stays is the team's name in a signed session cookie; no secret is kept or rendered.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile

import nats
from rota.auth.jwt import claims_of, read_creds
from rota.auth.keys import ADMIN
from starlette.requests import Request

from rota_console.reader import PLATFORM, Viewer
from rota_console.settings import ConsoleSettings

SESSION_TEAM = "team"
SESSION_CSRF = "csrf"
MAX_CREDS_BYTES = 16 * 1024


class LoginRefused(Exception):
    """Why these credentials do not log anyone in; safe to show (it never quotes them)."""


def identity_of(creds_text: str) -> Viewer:
    """The viewer a `.creds` file claims to be, unchecked: `verify` has the server check it."""
    if len(creds_text.encode()) > MAX_CREDS_BYTES:
        raise LoginRefused(f"creds: longer than {MAX_CREDS_BYTES} bytes; paste one .creds file")
    try:
        user_jwt, _ = read_creds(creds_text)
        claims = claims_of(user_jwt)
    except ValueError:
        raise LoginRefused("creds: not a NATS .creds file (a JWT and a seed)") from None
    tags = [t for t in claims.get("nats", {}).get("tags", []) if isinstance(t, str)]
    team = next((t.removeprefix("team:") for t in tags if t.startswith("team:")), None)
    if team:
        return Viewer(team)
    if not tags and claims.get("name") == ADMIN:
        return Viewer(PLATFORM)
    raise LoginRefused("creds: these are a service's or a run's credentials, not a team's")


async def verify(creds_text: str, nats_url: str) -> Viewer:
    """The viewer, once the NATS server accepted the credentials: a forged or expired JWT, or
    a seed that does not match it, is refused there."""
    # A browser's textarea sends CRLF line ends, which the .creds parser does not take.
    creds_text = creds_text.replace("\r\n", "\n").strip() + "\n"
    viewer = identity_of(creds_text)
    # nats-py reads credentials from a file: a private one, removed at once.
    fd, name = tempfile.mkstemp(prefix="rota-console-login-", suffix=".creds")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(creds_text)
        try:
            nc = await nats.connect(nats_url, user_credentials=name, connect_timeout=3,
                                    allow_reconnect=False, max_reconnect_attempts=0)
        except Exception as exc:  # nats-py and nkeys raise their own kinds for a bad key
            raise LoginRefused(f"creds: the NATS server refused them ({type(exc).__name__})"
                               ) from None
        await nc.close()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)
    return viewer


def viewer_of(request: Request, settings: ConsoleSettings) -> Viewer | None:
    """The viewer of this request, or None: not logged in (or the proxy named no one)."""
    if settings.trusted_header:
        team = request.headers.get(settings.trusted_header, "").strip()
        return Viewer(team) if team else None
    stored = request.session.get(SESSION_TEAM)
    return Viewer(stored) if isinstance(stored, str) and stored else None


def log_in(request: Request, viewer: Viewer) -> None:
    request.session.clear()
    request.session[SESSION_TEAM] = viewer.team
    request.session[SESSION_CSRF] = secrets.token_urlsafe(24)


def csrf_token(request: Request) -> str:
    """The token a write form must carry: a cross-site form cannot read it."""
    token = request.session.get(SESSION_CSRF)
    if not isinstance(token, str):
        token = secrets.token_urlsafe(24)
        request.session[SESSION_CSRF] = token
    return token
