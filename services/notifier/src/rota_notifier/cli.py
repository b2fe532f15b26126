"""`rota notifications [--failed] [--json]`: what the notifier sent, retries, and the dead letter.

Register with `app.command("notifications")(notifications_command)`. It asks the notifier over
core NATS request/reply on `rota.sys.notifier.list`; it never reads the notifier's tables.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any

import nats
import typer
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from rich.table import Table
from rota.bus.broker import connect_options
from rota.cli.output import CommandFailed, console, emit_json, handled
from rota.contracts import ContractError, parse
from rota.contracts import messages as m
from rota.endpoints import resolve
from rota.settings import Settings, get_settings

from rota_notifier.api import LIST_SUBJECT, ListNotifications


async def fetch(
    settings: Settings, query: ListNotifications, *, subject: str = LIST_SUBJECT
) -> list[dict[str, Any]]:
    """One request to the notifier; its rows, or `CommandFailed` with a one-line cause."""
    url = resolve(settings).nats_url
    try:
        nc = await nats.connect(url, connect_timeout=3, allow_reconnect=False,
                                max_reconnect_attempts=0, **connect_options(settings))
    except (OSError, NatsTimeout, TimeoutError, nats.errors.NoServersError) as exc:
        raise CommandFailed(f"cannot reach NATS at {url}: {exc or type(exc).__name__}") from None
    try:
        msg = await nc.request(subject, query.model_dump_json().encode(),
                               timeout=settings.request_timeout_s)
    except NoRespondersError:
        raise CommandFailed(f"no service answers {subject}: is the notifier up?") from None
    except NatsTimeout:
        raise CommandFailed(f"no answer on {subject} in {settings.request_timeout_s:.0f} s") from None
    finally:
        await nc.close()
    try:
        reply = parse(msg.data, m.ApiReply, max_bytes=64 * 1024 * 1024).data
    except ContractError as exc:
        raise CommandFailed(f"unreadable reply from the notifier: {exc}") from None
    if not reply.ok:
        message = reply.error.message if reply.error else "unknown error"
        raise CommandFailed(f"the notifier refused: {message}")
    rows: list[dict[str, Any]] = reply.result or []
    return rows


def _short_time(value: str | None) -> str:
    if not value:
        return "-"
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S")


def table(rows: list[dict[str, Any]], *, failed: bool) -> Table:
    out = Table(box=None, header_style="bold")
    columns = ["CREATED", "KIND", "RECIPIENT", "CHANNEL", "STATUS", "TRIES", "JOB"]
    columns += ["ERROR"] if failed else ["SENT / NEXT"]
    for column in columns:
        out.add_column(column, overflow="fold")
    for row in rows:
        when = row["sent_at"] if row["status"] == "sent" else row["next_attempt_at"]
        last = (row["last_error"] or "-") if failed else _short_time(when)
        out.add_row(
            _short_time(row["created_at"]), row["kind"], row["recipient"], row["channel"],
            row["status"], str(row["attempts"]), (row["job_id"] or "-")[:13], last,
        )
    return out


@handled
def notifications_command(
    failed: Annotated[bool, typer.Option(
        "--failed", help="Only the dead letter: notifications that gave up.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
    = False,
    limit: Annotated[int, typer.Option(
        "--limit", min=1, max=1000, help="At most this many, newest first.")] = 50,
) -> None:
    """Notifications sent, retrying or dead, newest first. No secret is ever shown."""
    query = ListNotifications(failed=failed, limit=limit)
    rows = asyncio.run(fetch(get_settings(), query, subject=LIST_SUBJECT))
    if json_out:
        emit_json(rows)
    elif rows:
        console.print(table(rows, failed=failed))
    else:
        console.print("no failed notifications" if failed else "no notifications yet")

