"""Who is looking: a team logged in with its credentials, or named by the platform's proxy.

Login proves possession of a team's `.creds` (or the admin's): the console connects to NATS
with them once, so the server checks the JWT's signature, its expiry and the seed, and then
forgets them. What stays is a session in `SessionBook`, until the credentials expire or the
viewer logs out; the cookie holds only its random id and the form token. No secret is kept
or rendered.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats
from rota.auth.jwt import claims_of, read_creds
from rota.auth.senders import Roster
from rota.contracts.common import TEAM_NAME_RULE, is_team_name
from rota.settings import Settings
from starlette.datastructures import FormData
from starlette.requests import Request

from rota_console.reader import PLATFORM, ApiFailure, Viewer
from rota_console.sessions import SessionBook
from rota_console.settings import ConsoleSettings

SESSION_ID = "sid"
SESSION_CSRF = "csrf"
MAX_CREDS_BYTES = 16 * 1024
PROXY_SECRET_HEADER = "X-Rota-Proxy-Secret"


class LoginRefused(Exception):
    """Why these credentials do not log anyone in; safe to show (it never quotes them)."""


@dataclass(frozen=True)
class Trust:
    """Whose JWTs a login may be: those Rota's account issued (not a run's, which its scoped
    signing key issues, and which could name itself anything), and the admin by public key."""

    account: str | None = None
    admins: frozenset[str] = frozenset()

    @classmethod
    def of(cls, rota: Settings) -> Trust:
        """From the roster (`ROTA_NATS_ROSTER`, or the auth directory's); else the account
        from the console's own credentials, which that account issued, and no admin."""
        roster = rota.nats_roster or (rota.nats_auth_dir / "roster.json" if rota.nats_auth_dir
                                      else None)
        if roster is not None and Path(roster).exists():
            loaded = Roster.load(Path(roster))
            if loaded.account is not None:
                return cls(loaded.account, loaded.admins)
        if rota.nats_creds is not None and Path(rota.nats_creds).exists():
            user_jwt, _ = read_creds(Path(rota.nats_creds).read_text())
            return cls(str(claims_of(user_jwt).get("iss")))
        return cls()


@dataclass(frozen=True)
class Login:
    viewer: Viewer
    expires_at: datetime | None
    """The credentials' own expiry (the JWT's `exp`), when they have one."""


def identity_of(creds_text: str, trust: Trust) -> Login:
    """The viewer a `.creds` file claims to be, unchecked: `verify` has the server check it."""
    if len(creds_text.encode()) > MAX_CREDS_BYTES:
        raise LoginRefused(f"creds: longer than {MAX_CREDS_BYTES} bytes; paste one .creds file")
    try:
        user_jwt, _ = read_creds(creds_text)
        claims = claims_of(user_jwt)
    except ValueError:
        raise LoginRefused("creds: not a NATS .creds file (a JWT and a seed)") from None
    if trust.account is not None and claims.get("iss") != trust.account:
        raise LoginRefused("creds: not issued by this Rota's account (a run's, or another's)")
    nats_claims = claims.get("nats")
    tags = [t for t in (nats_claims if isinstance(nats_claims, dict) else {}).get("tags", [])
            if isinstance(t, str)]
    expiry = claims.get("exp")
    expires_at = (datetime.fromtimestamp(expiry, UTC)
                  if isinstance(expiry, int | float) and not isinstance(expiry, bool) else None)
    team = next((t.removeprefix("team:") for t in tags if t.startswith("team:")), None)
    if team is not None:
        if not is_team_name(team):
            raise LoginRefused(f"creds: team {team!r} is not a team's name; {TEAM_NAME_RULE}")
        return Login(Viewer(team), expires_at)
    if not tags and claims.get("sub") in trust.admins:
        return Login(Viewer(PLATFORM), expires_at)
    raise LoginRefused("creds: not a team's or the admin's credentials (a service's, the "
                       "console's or a run's)")


async def verify(creds_text: str, nats_url: str, trust: Trust) -> Login:
    """The login, once the NATS server accepted the credentials: a forged or expired JWT, or
    a seed that does not match it, is refused there."""
    # A browser's textarea sends CRLF line ends, which the .creds parser does not take.
    creds_text = creds_text.replace("\r\n", "\n").strip() + "\n"
    login = identity_of(creds_text, trust)
    # nats-py reads credentials from a file: a private one, removed at once.
    fd, name = tempfile.mkstemp(prefix="rota-console-login-", suffix=".creds")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(creds_text)
        try:
            # nats-py reads 0 attempts as "no limit" on the first connect too: 1 gives up.
            nc = await nats.connect(nats_url, user_credentials=name, connect_timeout=3,
                                    allow_reconnect=False, max_reconnect_attempts=1,
                                    reconnect_time_wait=0.2)
        except (OSError, TimeoutError, nats.errors.NoServersError) as exc:
            raise LoginRefused("creds: the NATS server could not be reached to check them"
                               f" ({type(exc).__name__}); try again shortly") from None
        except Exception as exc:  # nats-py and nkeys raise their own kinds for a bad key
            raise LoginRefused(f"creds: the NATS server refused them ({type(exc).__name__})"
                               ) from None
        await nc.close()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(name)
    return login


def _one_header(request: Request, name: str) -> str | None:
    values = request.headers.getlist(name)
    if len(values) > 1:
        raise ApiFailure("AMBIGUOUS_HEADER", f"{name} is sent {len(values)} times; send it once",
                         name)
    return values[0] if values else None


def proxied_viewer(request: Request, settings: ConsoleSettings) -> Viewer | None:
    """The viewer the proxy names, believed only from the proxy: a declared peer address,
    carrying the proxy's secret when one is set, with exactly one header naming one team."""
    assert settings.trusted_header is not None
    peer = request.client.host if request.client else None
    if not settings.trusted_proxies_allow(peer):
        raise ApiFailure("UNTRUSTED_PEER", f"{peer} is not a trusted proxy; the console takes "
                         f"{settings.trusted_header} only from its proxy", "peer")
    if settings.trusted_proxy_secret is not None:
        given = _one_header(request, PROXY_SECRET_HEADER) or ""
        expected = settings.trusted_proxy_secret.get_secret_value()
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise ApiFailure("UNTRUSTED_PEER", f"{PROXY_SECRET_HEADER} is missing or wrong",
                             PROXY_SECRET_HEADER)
    team = (_one_header(request, settings.trusted_header) or "").strip()
    if not team:
        return None
    if team != PLATFORM and not is_team_name(team):
        raise ApiFailure("INVALID_HEADER", f"{settings.trusted_header} {team!r}: "
                         f"{TEAM_NAME_RULE}, or '*'", settings.trusted_header)
    return Viewer(team)


def viewer_of(request: Request, settings: ConsoleSettings, sessions: SessionBook) -> Viewer | None:
    """The viewer of this request, or None: not logged in (or the proxy named no one)."""
    if settings.trusted_header:
        return proxied_viewer(request, settings)
    team = sessions.team(request.session.get(SESSION_ID))
    return Viewer(team) if team else None


def log_in(request: Request, login: Login, sessions: SessionBook, now: datetime,
           max_age_s: float) -> None:
    """A new session (a new id: one chosen before login is never carried over), ending at the
    credentials' expiry or after `max_age_s`, whichever is sooner."""
    ends = now + timedelta(seconds=max_age_s)
    if login.expires_at is not None:
        ends = min(ends, login.expires_at)
    sessions.close(request.session.get(SESSION_ID))
    request.session.clear()
    request.session[SESSION_ID] = sessions.open(login.viewer.team, ends)
    request.session[SESSION_CSRF] = secrets.token_urlsafe(24)


def log_out(request: Request, sessions: SessionBook) -> None:
    sessions.close(request.session.get(SESSION_ID))
    request.session.clear()


def csrf_token(request: Request) -> str:
    """The token a write form must carry: a cross-site form cannot read it."""
    token = request.session.get(SESSION_CSRF)
    if not isinstance(token, str) or not token:
        token = secrets.token_urlsafe(24)
        request.session[SESSION_CSRF] = token
    return token


def check_form_token(request: Request, form: FormData) -> None:
    """Both tokens present, non-empty and equal: a request with no session and no token
    (two missing values) is as refused as a forged one."""
    expected, given = request.session.get(SESSION_CSRF), form.get("csrf")
    if not (isinstance(expected, str) and expected and isinstance(given, str) and given
            and hmac.compare_digest(given.encode(), expected.encode())):
        raise ApiFailure("UNAUTHORISED", "the form is stale or from another site; reload the "
                         "page and try again", "csrf")
