"""`rota notifications`: what the notifier sent, is retrying, or gave up on (the dead letter)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer
from rich.table import Table

from rota.cli.client import call
from rota.cli.output import console, emit_json, handled
from rota.cli.untrusted import untrusted

NO_CHANNEL = (
    "no channel is configured, so the notifier records and sends nothing: give it Slack "
    "(ROTA_SLACK_TOKEN, or ROTA_SLACK_WEBHOOK_URL) or email (ROTA_SMTP_HOST, and ROTA_SMTP_USER,"
    " ROTA_SMTP_PASSWORD if the server asks) in the notifier's environment (with `rota up`, "
    "its own) and restart it"
)


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
        out.add_row(*map(untrusted, (
            _short_time(row["created_at"]), row["kind"], row["recipient"], row["channel"],
            row["status"], str(row["attempts"]), (row["job_id"] or "-")[:13], last,
        )))
    return out


@handled
def notifications(
    failed: Annotated[bool, typer.Option(
        "--failed", help="Only the dead letter: notifications that gave up.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
    = False,
    limit: Annotated[int, typer.Option(
        "--limit", min=1, max=1000, help="At most this many, newest first.")] = 50,
) -> None:
    """Notifications sent, retrying or dead, newest first. No secret is ever shown."""
    from rota.contracts import messages as m
    from rota.contracts.subjects import NOTIFICATIONS_LIST
    from rota.settings import get_settings

    answer: dict[str, Any] = call(
        get_settings(), NOTIFICATIONS_LIST, m.ListNotifications(failed=failed, limit=limit,
                                                     with_channels=True)
    )
    rows: list[dict[str, Any]] = answer["notifications"]
    if json_out:
        emit_json(rows)
        return
    if rows:
        console.print(table(rows, failed=failed))
    if not answer["channels"]:
        console.print(NO_CHANNEL, highlight=False)
    elif not rows:
        console.print("no failed notifications" if failed else "no notifications yet")
