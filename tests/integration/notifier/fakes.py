"""Stand-ins on loopback for the outside world: a real SMTP server (aiosmtpd) and a local HTTP
server that answers like Slack's incoming webhook and Web API, with scripted failures."""

from __future__ import annotations

import email
import email.policy
import json
import socket
from collections import deque
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from aiohttp import web
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Collect:
    def __init__(self, sink: SmtpSink) -> None:
        self._sink = sink

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        self._sink.messages.append(message)
        return "250 OK"


class SmtpSink:
    """An SMTP server that can be started late (the "down, then up" case)."""

    def __init__(self, *, user: str | None = None, password: str | None = None) -> None:
        self.port = free_port()
        self.messages: list[EmailMessage] = []
        self._user, self._password = user, password
        self._controller: Controller | None = None

    def _authenticate(self, server: Any, session: Any, envelope: Any, mechanism: str,
                      auth_data: Any) -> AuthResult:
        ok = (isinstance(auth_data, LoginPassword)
              and auth_data.login.decode() == self._user
              and auth_data.password.decode() == self._password)
        return AuthResult(success=ok, handled=False)

    def start(self) -> None:
        kwargs: dict[str, Any] = {}
        if self._user is not None:
            kwargs = {"authenticator": self._authenticate, "auth_require_tls": False,
                      "auth_required": True}
        self._controller = Controller(_Collect(self), hostname="127.0.0.1", port=self.port,
                                      **kwargs)
        self._controller.start()

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    def to(self, address: str) -> list[EmailMessage]:
        return [m for m in self.messages if m["To"] == address]


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class SlackRequest:
    kind: str  # "webhook" or "api"
    path: str
    payload: dict[str, Any]
    headers: dict[str, str]
    status: int


class FakeSlack:
    """POST /services/... answers like an incoming webhook; POST /api/chat.postMessage like
    the Web API. `script` replies are used first, in order; then every call succeeds."""

    def __init__(self) -> None:
        self.requests: list[SlackRequest] = []
        self.script: deque[Reply] = deque()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def delivered(self) -> list[SlackRequest]:
        return [r for r in self.requests if r.status == 200]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/services/{rest:.*}", self._webhook)
        app.router.add_post("/api/chat.postMessage", self._api)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _webhook(self, request: web.Request) -> web.Response:
        payload = await request.json()
        reply = self.script.popleft() if self.script else Reply(200, "ok")
        self.requests.append(SlackRequest("webhook", request.path, payload,
                                          dict(request.headers), reply.status))
        return web.Response(status=reply.status, text=str(reply.body), headers=reply.headers)

    async def _api(self, request: web.Request) -> web.Response:
        payload = await request.json()
        reply = self.script.popleft() if self.script else Reply(
            200, {"ok": True, "channel": payload.get("channel"), "ts": "1.000001"})
        self.requests.append(SlackRequest("api", request.path, payload, dict(request.headers),
                                          reply.status))
        return web.Response(status=reply.status, text=json.dumps(reply.body),
                            content_type="application/json", headers=reply.headers)
