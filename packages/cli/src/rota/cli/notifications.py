"""`rota notifications`: what the notifier sent, is retrying, or gave up on (the dead letter)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rota.cli.client import call
from rota.cli.columns import Column, Output, OutputOpt, print_table
from rota.cli.output import console, emit_json, handled
from rota.formats import age, moment, short

NO_CHANNEL = (
    "no channel is configured, so the notifier records and sends nothing: give it Slack "
    "(ROTA_SLACK_TOKEN, or ROTA_SLACK_WEBHOOK_URL) or email (ROTA_SMTP_HOST, and ROTA_SMTP_USER,"
    " ROTA_SMTP_PASSWORD if the server asks) in the notifier's environment (with `rota up`, "
    "its own) and restart it"
)


NOTIFICATION_COLUMNS = (
    Column("AGE", whole=True), Column("KIND", whole=True), Column("RECIPIENT"),
    Column("CHANNEL", whole=True), Column("STATUS", whole=True), Column("TRIES", whole=True),
    Column("JOB", whole=True), Column("CREATED", wide=True), Column("SENT / NEXT", wide=True),
)
ERROR_COLUMN = Column("ERROR")


def notification_rows(rows: list[dict[str, Any]], *, failed: bool) -> list[list[str]]:
    """One line per notification; the times themselves with `-o wide`, the error of a dead
    one (cut to fit, whole with `-o wide`) with `--failed`."""
    lines = []
    for row in rows:
        when = row["sent_at"] if row["status"] == "sent" else row["next_attempt_at"]
        lines.append([age(row["created_at"]), row["kind"], row["recipient"], row["channel"],
                      row["status"], str(row["attempts"]), short(row["job_id"]),
                      moment(row["created_at"]), moment(when),
                      *([row["last_error"] or "-"] if failed else [])])
    return lines


@handled
def notifications(
    failed: Annotated[bool, typer.Option(
        "--failed", help="Only the dead letter: notifications that gave up.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
    = False,
    limit: Annotated[int, typer.Option(
        "--limit", min=1, max=1000, help="At most this many, newest first.")] = 50,
    output: OutputOpt = None,
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
        columns = (*NOTIFICATION_COLUMNS, *([ERROR_COLUMN] if failed else []))
        print_table(console, columns, notification_rows(rows, failed=failed),
                    wide=output is Output.wide)
    if not answer["channels"]:
        console.print(NO_CHANNEL, highlight=False)
    elif not rows:
        console.print("no failed notifications" if failed else "no notifications yet")
