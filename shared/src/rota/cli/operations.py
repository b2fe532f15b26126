"""`rota preemptions` and `rota allocations`: what the coordinator and the ledger hold."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from rota.cli.client import call
from rota.cli.output import console, emit_json, handled
from rota.contracts import messages as m
from rota.contracts.subjects import LEDGER_ALLOCATIONS, PREEMPTION_PLANS
from rota.settings import get_settings
from rota.units import gpu_time

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@handled
def preemptions(
    job: Annotated[str | None, typer.Option(help="Plans with this job as preemptor or victim.")] = None,
    open_only: Annotated[bool, typer.Option("--open", help="Only plans in progress.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = 50,
    json_out: JsonOpt = False,
) -> None:
    """Preemption sagas, newest first: each victim's notice, deadline, ack and outcome."""
    plans: list[dict[str, Any]] = call(
        get_settings(), PREEMPTION_PLANS,
        m.ListPreemptions(job_id=job, open=open_only, limit=limit),
    )
    if json_out:
        emit_json(plans)
        return
    table = Table(box=None, header_style="bold")
    for column in ("PLAN", "PREEMPTOR", "STATE", "VICTIM", "OUTCOME", "ACKED", "LOST",
                   "CHECKPOINT"):
        table.add_column(column, overflow="fold")
    for plan in plans:
        for victim in plan["victims"] or [{}]:
            table.add_row(
                plan["plan_id"][:13], f"{plan['preemptor_job_id'][:13]} ({plan['preemptor_queue']})",
                plan["state"], victim.get("job_name") or (victim.get("job_id") or "")[:13],
                victim.get("outcome") or victim.get("state") or "",
                str(victim.get("acked_at") or "-")[11:19],
                gpu_time(victim.get("lost_gpu_seconds") or 0.0),
                victim.get("checkpoint_uri") or "-",
            )
    console.print(table if plans else "no preemptions")


@handled
def allocations(
    all_runs: Annotated[bool, typer.Option("--all", help="Released ones too, newest first.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="At most this many.")] = 1000,
    json_out: JsonOpt = False,
) -> None:
    """The ledger's allocations: which run holds which GPUs, and how many are borrowed."""
    result: dict[str, Any] = call(get_settings(), LEDGER_ALLOCATIONS,
                                  m.ListAllocations(active_only=not all_runs, limit=limit))
    rows = result["allocations"]
    if json_out:
        emit_json(result)
        return
    table = Table(box=None, header_style="bold")
    for column in ("RUN", "JOB", "TEAM", "QUEUE", "GPUS", "BORROWED", "PLACEMENT", "GRANTED"):
        table.add_column(column, overflow="fold")
    for row in rows:
        placement = " ".join(f"{p['node']}[{','.join(map(str, p['gpus']))}]"
                             for p in row["placement"])
        table.add_row(row["run_id"][:13], row["job_id"][:13], row["team"], row["queue"],
                      str(row["gpus"]), str(row["borrowed_gpus"]), placement,
                      row["granted_at"][:19])
    console.print(table if rows else "no allocations")
