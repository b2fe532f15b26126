"""`rota deadletter`: the messages each service gave up on after `ROTA_MAX_DELIVER` tries."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rota.cli.client import request
from rota.cli.columns import Column, Output, OutputOpt, print_table
from rota.cli.output import CommandFailed, InvalidInput, console, emit_json, handled
from rota.cli.stack import SERVICES
from rota.formats import age, moment

if TYPE_CHECKING:
    from rota.settings import Settings

DEAD_LETTER_COLUMNS = (
    Column("AGE", whole=True), Column("SERVICE", whole=True), Column("CONSUMER"),
    Column("SUBJECT"), Column("SEQ", whole=True), Column("TRIES", whole=True), Column("ERROR"),
    Column("WHEN", wide=True),
)


def dead_letter_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [[age(row["created_at"]), row["service"], row["consumer"], row["subject"],
             str(row["stream_seq"]), str(row["deliveries"]), f"{row['error_type']}: {row['error']}",
             moment(row["created_at"])] for row in rows]


async def _gather(settings: Settings, services: list[str],
                  limit: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Every service's dead letters, asked at once; and the services that did not answer."""
    from rota.contracts import messages as m
    from rota.contracts.subjects import deadletter as deadletter_subject

    async def one(service: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = await request(
            settings, deadletter_subject(service), m.ListDeadLetters(limit=limit))
        return [{"service": service, **row} for row in result]

    answers = await asyncio.gather(*(one(s) for s in services), return_exceptions=True)
    rows: list[dict[str, Any]] = []
    failed: dict[str, str] = {}
    for service, answer in zip(services, answers, strict=True):
        if isinstance(answer, BaseException):
            failed[service] = str(answer)
        else:
            rows.extend(answer)
    rows.sort(key=lambda row: row["created_at"] or "", reverse=True)
    return rows[:limit], failed


@handled
def deadletter(
    service: Annotated[str | None, typer.Option(
        "--service", help=f"Only this service: one of {', '.join(SERVICES)}.")] = None,
    limit: Annotated[int, typer.Option(
        "--limit", min=1, max=1000, help="At most this many, newest first.")] = 50,
    output: OutputOpt = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
    = False,
) -> None:
    """Messages a service could not handle in ROTA_MAX_DELIVER deliveries, newest first.
    `--json` adds the payload, truncated, with run tokens and other secrets blanked out."""
    from rota.settings import get_settings

    if service is not None and service not in SERVICES:
        raise InvalidInput(f"no service {service!r}; one of {', '.join(SERVICES)}", "service")
    rows, failed = asyncio.run(_gather(get_settings(), [service] if service else list(SERVICES),
                                       limit))
    if json_out:
        emit_json(rows)
    elif rows:
        print_table(console, DEAD_LETTER_COLUMNS, dead_letter_rows(rows),
                    wide=output is Output.wide)
    else:
        console.print("no dead letters")
    if failed:
        raise CommandFailed("; ".join(f"{name}: {why}" for name, why in failed.items()))
