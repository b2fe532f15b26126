"""NATS connection options from settings, importable without FastStream (the CLI stays quick)."""

from __future__ import annotations

from typing import Any

from rota.settings import Settings


def connect_options(settings: Settings) -> dict[str, Any]:
    """Credentials for nats-py: user/password, a token, or a .creds file, whichever is set."""
    options: dict[str, Any] = {}
    if settings.nats_user:
        options["user"] = settings.nats_user
        if settings.nats_password:
            options["password"] = settings.nats_password.get_secret_value()
    if settings.nats_token:
        options["token"] = settings.nats_token.get_secret_value()
    if settings.nats_creds:
        options["user_credentials"] = str(settings.nats_creds)
    return options
