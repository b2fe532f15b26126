"""Keeping secrets out of logs, stored errors and `--json` output.

Secrets live in `SecretStr` settings and are unwrapped only at the call that needs them. Every
error text that leaves a channel still goes through `Redactor.redact`, because third-party
exceptions may quote a URL or a header, and the patterns below catch Slack secrets that were
never configured here (say, a webhook URL pasted into a template).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from pydantic import SecretStr
from rota.settings import Settings

MASK = "***"

_PATTERNS = (
    re.compile(r"https?://hooks\.slack\.com/\S+"),
    re.compile(r"xox[abposre]-[A-Za-z0-9-]+"),
    re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?)(bearer\s+)?[^\s'\",}]+"),
)


class Redactor:
    def __init__(self, secrets: Iterable[str | SecretStr | None]) -> None:
        values: set[str] = set()
        for secret in secrets:
            raw = secret.get_secret_value() if isinstance(secret, SecretStr) else secret
            if not raw or len(raw) < 4:
                continue
            values.add(raw)
            parts = urlsplit(raw)
            if parts.scheme and parts.path and len(parts.path) > 8:
                values.add(parts.path)  # a webhook's path is the secret part of its URL
        # Longest first, so a URL is masked whole before its path would be.
        self._values = sorted(values, key=len, reverse=True)

    @classmethod
    def from_settings(cls, settings: Settings) -> Redactor:
        return cls([
            settings.slack_webhook_url, settings.slack_token, settings.smtp_password,
            settings.nats_password, settings.nats_token,
        ])

    def redact(self, text: str) -> str:
        for value in self._values:
            text = text.replace(value, MASK)
        for pattern in _PATTERNS:
            text = pattern.sub(
                lambda match: (match.group(1) + MASK) if match.lastindex else MASK, text
            )
        return text


class RedactingFilter(logging.Filter):
    """Defence in depth on the service's log handlers: mask any secret that slipped through."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self._redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = self._redactor.redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None:
            # Format the traceback now, redacted, so the handler does not format it raw.
            formatter = logging.Formatter()
            record.exc_text = self._redactor.redact(formatter.formatException(record.exc_info))
            record.exc_info = None
        return True


def install_log_filter(redactor: Redactor) -> None:
    """Attach the filter to every root handler (the service's console output)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter(redactor))
