"""What every response and every state-changing request gets, whatever the route: security
headers on all responses (static files and the event stream included), and a refusal of
a POST that a browser says came from another site.

The form token (`access.check_form_token`) is the CSRF defence that works for every client;
`Sec-Fetch-Site` and `Origin` are the browser's own word on where a request came from, and
also cover the login and logout forms, which carry no token.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    # Scripts only from the console's own files; inline `style` attributes colour the teams.
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    # Not `no-referrer`: under it a browser sends `Origin: null` even on the console's own
    # form posts; `same-origin` still tells other sites (a Jaeger link) nothing.
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SAME_SITE = frozenset({"same-origin", "none"})  # `none`: typed in or bookmarked


def cross_site_refusal(method: str, headers: Headers, allowed_origins: frozenset[str]) -> str | None:
    """Why a state-changing request is refused as cross-site, or None. A client that sends
    neither header (curl, a script) is not a browser a page could have driven."""
    if method in SAFE_METHODS:
        return None
    fetch_site = headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in SAME_SITE:
        return f"Sec-Fetch-Site is {fetch_site!r}: only the console's own pages may do this"
    origin = headers.get("origin")
    if origin is None or origin.rstrip("/") in allowed_origins:
        return None
    if origin == "null" or urlsplit(origin).netloc != headers.get("host", ""):
        return f"Origin {origin!r} is not this console's: only its own pages may do this"
    return None


class Hardening:
    """ASGI middleware: the security headers, and the cross-site check."""

    def __init__(self, app: ASGIApp, allowed_origins: list[str]) -> None:
        self.app = app
        self.allowed_origins = frozenset(o.rstrip("/") for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []),
                                      *(h for h in SECURITY_HEADERS if h[0] not in present)]
            await send(message)

        why = cross_site_refusal(scope["method"], Headers(scope=scope), self.allowed_origins)
        if why is not None:
            refusal = JSONResponse({"error": {"code": "CROSS_SITE", "field": "origin",
                                              "message": why}}, status_code=403)
            await refusal(scope, receive, with_headers)
            return
        await self.app(scope, receive, with_headers)
