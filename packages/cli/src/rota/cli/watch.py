"""`rota watch`: follow a team's jobs as their events happen, from its live feed."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rota.cli.client import connected
from rota.cli.output import CommandFailed, InvalidInput, console, emit_json, err_console, handled
from rota.cli.untrusted import plain
from rota.formats import moment, short

if TYPE_CHECKING:  # NATS loads when the watch starts
    from nats.aio.msg import Msg

    from rota.settings import Settings


def summary(doc: dict[str, Any]) -> str:
    """One line about an event, for people; `--json` has the whole envelope."""
    data: dict[str, Any] = doc.get("data") or {}
    kind = doc.get("type")
    if kind == "JobPending":
        reasons = data.get("reasons") or [{}]
        eta = data.get("eta")
        return f"waits: {reasons[0].get('code', '?')}" + (f", eta {moment(eta)}" if eta else "")
    if kind == "AllocationGranted":
        return f"{data.get('gpus')} GPU(s) of {data.get('flavor')}"
    if kind == "JobResubmitted":
        return f"submitted again as {data.get('submission_id')}: the same job, nothing new"
    if kind in ("JobRejected", "AllocationRejected"):
        return f"{data.get('code')}: {data.get('message')}"
    if kind == "RunStopped":
        forced = ", forced" if data.get("forced") else ""
        return f"{data.get('reason')}{forced}, checkpoint {data.get('checkpoint_uri') or '-'}"
    if kind == "RunCheckpointed":
        ack = " (acknowledges the notice)" if data.get("notice_id") else ""
        return f"{data.get('checkpoint_uri')}{ack}"
    if kind == "RunFailed":
        return str(data.get("error"))
    if kind == "PreemptionNoticed":
        return f"preemption notice: save by {moment(data.get('deadline'))}"
    return str(data.get("name") or data.get("reason") or "")


def _line(doc: dict[str, Any]) -> str:
    at, job = moment(doc.get("occurred_at")), short(doc.get("job_id"))
    return f"{at}  {doc.get('type', '?'):<19} {job}  {summary(doc)}"


def _is_job(doc: dict[str, Any], job: str) -> bool:
    job_id = str(doc.get("job_id"))
    return job_id.startswith(job) or job_id.endswith(job)


async def follow(settings: Settings, *, team: str | None, job: str | None, count: int | None,
                 seconds: float | None, json_out: bool) -> int:
    from rota.contracts.subjects import FEED_PREFIX, team_feed
    from rota.flushed import flushed

    async with connected(settings) as conn:
        if team is not None and conn.team is not None and team != conn.team:
            raise InvalidInput(f"these credentials are team {conn.team}'s", "--team")
        team = team or conn.team
        subject = team_feed(team) if team else f"{FEED_PREFIX}.>"
        seen = 0
        done = asyncio.Event()

        async def on_event(msg: Msg) -> None:
            nonlocal seen
            try:
                doc = json.loads(msg.data)
            except ValueError:
                return
            if not isinstance(doc, dict) or (job and not _is_job(doc, job)):
                return
            if json_out:
                emit_json(doc, compact=True)
            else:
                console.print(plain(_line(doc)), highlight=False, markup=False)
            seen += 1
            if count is not None and seen >= count:
                done.set()

        await conn.nc.subscribe(subject, cb=on_event)
        await flushed(conn.nc)
        await asyncio.sleep(0.1)  # a refused subscription is reported asynchronously
        if conn.refusals:
            raise CommandFailed(f"NATS refused {subject}: {conn.refusals[0]}")
        # On stderr, so that `--json` output stays one envelope per line.
        err_console.print(f"watching {subject} (Ctrl-C to stop)", highlight=False)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout=seconds)
        return seen


@handled
def watch(
    team: Annotated[str | None, typer.Option(
        "--team", help="The team to follow (admin); team credentials follow their own.")] = None,
    job: Annotated[str | None, typer.Option(
        "--job", help="Only this job: its id, short id, or 8+ of its first or last characters.")]
    = None,
    count: Annotated[int | None, typer.Option(
        "--count", min=1, help="Stop after this many events.")] = None,
    seconds: Annotated[float | None, typer.Option(
        "--for", min=0.1, help="Stop after this many seconds.")] = None,
    json_out: Annotated[bool, typer.Option(
        "--json", help="One event envelope per line (JSON Lines).")] = False,
) -> None:
    """Follow your jobs' events live: submitted, waiting (reason, ETA), granted, started,
    checkpointed, noticed, stopped, finished. Live only: what happened before is in `rota
    trace`."""
    from rota.settings import get_settings

    asyncio.run(follow(get_settings(), team=team, job=job, count=count, seconds=seconds,
                       json_out=json_out))
