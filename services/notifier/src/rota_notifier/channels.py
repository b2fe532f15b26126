"""The channels: Slack (incoming webhook, or the Web API through slack-sdk) and SMTP email.

Each sender does one delivery and classifies its failure: `DeliveryError(permanent=True)` ends
in the dead letter; anything else is retried, with Slack's `Retry-After` passed on. Error
messages never quote a URL, a token or a password: they name the channel and the status.
"""

from __future__ import annotations

from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any, Protocol

import aiohttp
import aiosmtplib
from pydantic import SecretStr
from rota.settings import Settings
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from rota_notifier.policy import DeliveryError, parse_retry_after
from rota_notifier.render import Rendered
from rota_notifier.routing import Channel

# Slack Web API `error` values worth another try; any other error is a permanent refusal.
_SLACK_TRANSIENT = frozenset({
    "ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout",
})
_SLACK_SECTION_LIMIT = 3000
_SLACK_HEADER_LIMIT = 150


@dataclass(frozen=True)
class Outgoing:
    notification_id: str
    address: str
    recipient_kind: str
    rendered: Rendered


class Sender(Protocol):
    channel: Channel

    async def send(self, message: Outgoing) -> None: ...

    async def aclose(self) -> None: ...


def slack_blocks(message: Outgoing, *, mention: bool) -> list[dict[str, Any]]:
    """Block Kit: a header, the body in mrkdwn, and a context line."""
    body = message.rendered.slack
    if mention:
        # Incoming webhooks post to one fixed channel, so a person is pinged, not DMed.
        body = f"<@{message.address}> {body}"
    return [
        {"type": "header",
         "text": {"type": "plain_text", "text": message.rendered.subject[:_SLACK_HEADER_LIMIT]}},
        {"type": "section",
         "text": {"type": "mrkdwn", "text": body[:_SLACK_SECTION_LIMIT]}},
        {"type": "context",
         "elements": [{"type": "mrkdwn", "text": f"Rota notification {message.notification_id}"}]},
    ]


def _fallback(message: Outgoing) -> str:
    """The `text` Slack shows in notifications and to clients without Block Kit."""
    return f"{message.rendered.subject}\n\n{message.rendered.text}"[:_SLACK_SECTION_LIMIT]


class SlackWebhook:
    channel = Channel.slack

    def __init__(self, url: SecretStr, *, timeout_s: float = 30.0) -> None:
        self._url = url
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def send(self, message: Outgoing) -> None:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        payload = {"text": _fallback(message),
                   "blocks": slack_blocks(message, mention=message.recipient_kind == "user")}
        try:
            async with self._session.post(self._url.get_secret_value(), json=payload) as resp:
                body = (await resp.text())[:200]
                status, retry_after = resp.status, resp.headers.get("Retry-After")
        except (aiohttp.ClientError, TimeoutError) as exc:
            # aiohttp errors can quote the URL; name the kind of failure only.
            raise DeliveryError(f"slack webhook: {type(exc).__name__}", permanent=False) from None
        if status < 300:
            return
        detail = f"slack webhook: HTTP {status} {body.strip()}".strip()
        if status == 429 or status >= 500:
            raise DeliveryError(detail, permanent=False,
                                retry_after_s=parse_retry_after(retry_after))
        raise DeliveryError(detail, permanent=True)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


class SlackWebApi:
    """chat.postMessage to a user id (a DM from the app) or to a channel."""

    channel = Channel.slack

    def __init__(self, token: SecretStr, *, base_url: str | None = None,
                 timeout_s: float = 30.0) -> None:
        kwargs: dict[str, Any] = {"base_url": base_url} if base_url else {}
        # No built-in retry handlers: retries are ours, persistent, and visible.
        self._client = AsyncWebClient(token=token.get_secret_value(), timeout=int(timeout_s),
                                      retry_handlers=[], **kwargs)

    async def send(self, message: Outgoing) -> None:
        try:
            await self._client.chat_postMessage(
                channel=message.address, text=_fallback(message),
                blocks=slack_blocks(message, mention=False), unfurl_links=False,
            )
        except SlackApiError as exc:
            status = exc.response.status_code
            error = str(exc.response.get("error") or "") if isinstance(exc.response.data, dict) \
                else ""
            retry_after = parse_retry_after(exc.response.headers.get("Retry-After")) \
                if exc.response.headers else None
            detail = f"slack api: HTTP {status} {error}".strip()
            transient = status == 429 or status >= 500 or error in _SLACK_TRANSIENT
            raise DeliveryError(detail, permanent=not transient,
                                retry_after_s=retry_after) from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise DeliveryError(f"slack api: {type(exc).__name__}", permanent=False) from None

    async def aclose(self) -> None:
        return None


class Smtp:
    channel = Channel.email

    def __init__(self, settings: Settings) -> None:
        assert settings.smtp_host is not None
        self._host = settings.smtp_host
        self._port = settings.smtp_port
        self._user = settings.smtp_user
        self._password = settings.smtp_password
        self._sender = settings.smtp_from
        self._starttls = settings.smtp_starttls
        self._timeout_s = settings.smtp_timeout_s

    def build(self, message: Outgoing) -> EmailMessage:
        """multipart/alternative: plain text first, HTML preferred by clients that can."""
        email = EmailMessage()
        email["From"] = self._sender
        email["To"] = message.address
        email["Subject"] = message.rendered.subject
        email["Date"] = formatdate(localtime=False)
        email["Message-ID"] = make_msgid(idstring=message.notification_id, domain="rota")
        email["Auto-Submitted"] = "auto-generated"  # no out-of-office replies, please
        email["X-Rota-Notification"] = message.notification_id
        email.set_content(message.rendered.text)
        email.add_alternative(message.rendered.html, subtype="html")
        return email

    async def send(self, message: Outgoing) -> None:
        try:
            await aiosmtplib.send(
                self.build(message), hostname=self._host, port=self._port,
                username=self._user,
                password=self._password.get_secret_value() if self._password else None,
                start_tls=self._starttls, timeout=self._timeout_s,
            )
        except aiosmtplib.SMTPRecipientsRefused as exc:
            codes = sorted({r.code for r in exc.recipients})
            raise DeliveryError(f"smtp: recipient refused {codes}",
                                permanent=bool(codes) and all(c >= 500 for c in codes)) from None
        except aiosmtplib.SMTPResponseException as exc:
            # 5xx is the server's final word (bad address, bad login); 4xx is "try later".
            raise DeliveryError(f"smtp: {exc.code} {exc.message[:200]}",
                                permanent=exc.code >= 500) from None
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            raise DeliveryError(f"smtp: {type(exc).__name__}: {exc}"[:300],
                                permanent=False) from None

    async def aclose(self) -> None:
        return None


def build_senders(settings: Settings) -> dict[Channel, Sender]:
    """The configured channels. Slack prefers the Web API (it can DM); else the webhook."""
    senders: dict[Channel, Sender] = {}
    if settings.slack_token is not None:
        senders[Channel.slack] = SlackWebApi(settings.slack_token,
                                             base_url=settings.slack_api_url)
    elif settings.slack_webhook_url is not None:
        senders[Channel.slack] = SlackWebhook(settings.slack_webhook_url)
    if settings.smtp_host:
        senders[Channel.email] = Smtp(settings)
    return senders
