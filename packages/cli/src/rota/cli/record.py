"""`rota trace`: the decision record of a job, printed for people.

The submission service answers with the job, its timeline, its decisions and its
preemptions (from its read model of the event stream). Notifications are not in that
stream, so the CLI asks the notifier (`rota.sys.notifier.list` with a `job_id`) and merges
its answer in; a notifier that is down costs that one section, not the whole record.
"""

from __future__ import annotations

from typing import Any

from rota import waits
from rota.cli.client import request
from rota.cli.output import CommandFailed, InvalidInput, console
from rota.cli.untrusted import untrusted
from rota.contracts import messages as m
from rota.contracts.subjects import NOTIFICATIONS_LIST
from rota.formats import moment, score, short
from rota.settings import Settings
from rota.units import gpu_time

NOTIFICATION_LIMIT = 200


async def notifications(settings: Settings, job_id: str) -> tuple[list[dict[str, Any]] | None,
                                                                   str | None]:
    """The job's notifications, oldest first, or None and why they are missing."""
    try:
        rows = await request(settings, NOTIFICATIONS_LIST,
                             m.ListNotifications(job_id=job_id, limit=NOTIFICATION_LIMIT))
    except (CommandFailed, InvalidInput) as exc:
        return None, str(exc)
    return list(reversed(rows)), None


def print_record(result: dict[str, Any]) -> None:
    job = result["job"]
    console.print(f"[bold]{untrusted(job['name'])}[/bold] "
                  + untrusted(f"{job['job_id']} — {job['state']}"), highlight=False)
    decisions = iter(d for d in result.get("decisions", []))
    pending = next(decisions, None)
    for entry in result["timeline"]:
        console.print(untrusted(f"  {moment(entry['at'])}  {entry['source']:<10}  {entry['summary']}"),
                      highlight=False)
        # Decisions come from the same rows in the same order: put each one's factors
        # (and every reason, for a hold) under its timeline line.
        if pending is not None and entry["type"] in ("JobPending", "AllocationProposed",
                                                     "PreemptionRequested"):
            extra = [f"score  {text}" if (text := score(pending.get("factors"))) else ""]
            if pending["decision"] == "hold":
                extra += [f"also {waits.title(r['code'])}: {r['message']}"  # holds: on its line
                          for r in pending.get("reasons", [])[1:] if r["code"] not in waits.HOLDS]
            for line in filter(None, extra):
                console.print(f"  {'':23}  {'':<10}    {untrusted(line)}", highlight=False)
            pending = next(decisions, None)
    _print_preemptions(result.get("preemptions") or [])
    _print_notifications(result)
    console.print(f"\ntrace id {untrusted(result.get('trace_id', '-'))} (search it in Jaeger)",
                  highlight=False)


def _print_preemptions(plans: list[dict[str, Any]]) -> None:
    if not plans:
        return
    console.print("\n[bold]Preemptions[/bold]")
    for plan in plans:
        if plan["role"] == "caused":
            victims = ", ".join(f"{v.get('job_name') or short(v['job_id'])} {v.get('outcome') or '…'}"
                                for v in plan["victims"])
            console.print(untrusted(
                f"  caused {short(plan['plan_id'])} at {moment(plan['requested_at'])}:"
                f" {waits.plan_reason(plan['reason'])} — victims {victims};"
                f" {plan['outcome'] or 'open'}"),
                highlight=False)
            continue
        lost = plan.get("lost_gpu_seconds")
        console.print(untrusted(
            f"  suffered {short(plan['plan_id'])} for {plan.get('preemptor_queue')} job"
            f" {short(plan['preemptor_job_id'])}: {waits.plan_reason(plan['reason'])}\n"
            f"    requested {moment(plan['requested_at'])}, noticed {moment(plan['noticed_at'])}"
            f" (deadline {moment(plan['deadline'])}), acked {moment(plan['acked_at'])}"
            f" with {plan.get('ack_checkpoint_uri') or 'no checkpoint'},"
            f" stopped {moment(plan['stopped_at'])}{' (forced)' if plan.get('forced') else ''};"
            f" {plan['outcome'] or 'open'}"
            + (f", lost {gpu_time(float(lost))}" if lost else ""), multiline=True),
            highlight=False)


def _print_notifications(result: dict[str, Any]) -> None:
    rows = result.get("notifications")
    console.print("\n[bold]Notifications[/bold]")
    if rows is None:
        console.print(f"  unknown: {untrusted(result.get('notifications_error'))}", highlight=False)
        return
    if not rows:
        console.print("  none")
    for row in rows:
        when = row.get("sent_at") or row.get("next_attempt_at")
        console.print(untrusted(f"  {moment(row.get('created_at'))}  {row['kind']} to {row['recipient']}"
                                f" by {row['channel']}: {row['status']} {moment(when)}"), highlight=False)
