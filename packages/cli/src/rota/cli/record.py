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


def _t(value: Any) -> str:
    return str(value)[:23].replace("T", " ") if value else "-"


def _factors(factors: dict[str, Any] | None) -> str:
    if not factors:
        return ""
    parts = [f"{k}={float(v):.3g}" for k, v in factors.items() if k != "total"]
    return f"score {float(factors.get('total', 0.0)):.4g} ({', '.join(parts)})"


def print_record(result: dict[str, Any]) -> None:
    job = result["job"]
    console.print(f"[bold]{untrusted(job['name'])}[/bold] "
                  + untrusted(f"{job['job_id']} — {job['state']}"), highlight=False)
    decisions = iter(d for d in result.get("decisions", []))
    pending = next(decisions, None)
    for entry in result["timeline"]:
        console.print(untrusted(f"  {_t(entry['at'])}  {entry['source']:<10}  {entry['summary']}"),
                      highlight=False)
        # Decisions come from the same rows in the same order: put each one's factors
        # (and every reason, for a hold) under its timeline line.
        if pending is not None and entry["type"] in ("JobPending", "AllocationProposed",
                                                     "PreemptionRequested"):
            extra = [_factors(pending.get("factors"))]
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
            victims = ", ".join(f"{v.get('job_name') or v['job_id'][:13]} {v.get('outcome') or '…'}"
                                for v in plan["victims"])
            console.print(untrusted(
                f"  caused {plan['plan_id'][:13]} at {_t(plan['requested_at'])}:"
                f" {waits.plan_reason(plan['reason'])} — victims {victims};"
                f" {plan['outcome'] or 'open'}"),
                highlight=False)
            continue
        lost = plan.get("lost_gpu_seconds")
        console.print(untrusted(
            f"  suffered {plan['plan_id'][:13]} for {plan.get('preemptor_queue')} job"
            f" {str(plan['preemptor_job_id'])[:13]}: {waits.plan_reason(plan['reason'])}\n"
            f"    requested {_t(plan['requested_at'])}, noticed {_t(plan['noticed_at'])}"
            f" (deadline {_t(plan['deadline'])}), acked {_t(plan['acked_at'])}"
            f" with {plan.get('ack_checkpoint_uri') or 'no checkpoint'},"
            f" stopped {_t(plan['stopped_at'])}{' (forced)' if plan.get('forced') else ''};"
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
        console.print(untrusted(f"  {_t(row.get('created_at'))}  {row['kind']} to {row['recipient']}"
                                f" by {row['channel']}: {row['status']} {_t(when)}"), highlight=False)
