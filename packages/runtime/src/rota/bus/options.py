"""NATS connection options from settings, importable without FastStream (the CLI stays quick)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rota.endpoints import running_creds
from rota.settings import Settings


def connect_options(settings: Settings) -> dict[str, Any]:
    """Credentials for nats-py: user/password, a token, or a .creds file, whichever is set;
    with none set, the admin credentials of the `rota up` running under `ROTA_HOME`.

    A `.creds` file of Rota's names the inbox prefix its identity may subscribe to (a team
    reads only its own replies), and the connection uses it."""
    options: dict[str, Any] = {}
    if settings.nats_user:
        options["user"] = settings.nats_user
        if settings.nats_password:
            options["password"] = settings.nats_password.get_secret_value()
    if settings.nats_token:
        options["token"] = settings.nats_token.get_secret_value()
    creds = settings.nats_creds
    if creds is None and not options and (running := running_creds(settings)) is not None:
        creds = Path(running)
    if creds is not None:
        options["user_credentials"] = str(creds)
        if (prefix := creds_inbox_prefix(creds)) is not None:
            options["inbox_prefix"] = prefix
    return options


def creds_tags(creds: Path) -> list[str]:
    """The tags of a `.creds` file's user JWT (its signature is the server's to check)."""
    from rota.auth.jwt import claims_of, read_creds

    try:
        user_jwt, _ = read_creds(creds.read_text())
        tags = claims_of(user_jwt).get("nats", {}).get("tags", [])
    except (OSError, ValueError):
        return []
    return [t for t in tags if isinstance(t, str)]


def creds_inbox_prefix(creds: Path) -> str | None:
    return next((t.removeprefix("inbox:") for t in creds_tags(creds) if t.startswith("inbox:")),
                None)


def creds_team(creds: Path) -> str | None:
    """The team a team identity's `.creds` speaks for; None for a service or the admin."""
    return next((t.removeprefix("team:") for t in creds_tags(creds) if t.startswith("team:")),
                None)
