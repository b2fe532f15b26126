"""`rota preemptions` and `rota allocations`: what the coordinator and the ledger hold."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rota.cli.client import call
from rota.cli.columns import Column, Output, OutputOpt, print_table
from rota.cli.output import console, emit_json, handled
from rota.formats import age, moment, short
from rota.units import gpu_time

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


PREEMPTION_COLUMNS = (
    Column("PREEMPTOR", whole=True), Column("STATE", whole=True), Column("VICTIM", whole=True),
    Column("OUTCOME", whole=True), Column("ACKED", whole=True), Column("LOST", whole=True),
    Column("PLAN", wide=True), Column("QUEUE", wide=True), Column("GPUS", wide=True),
    Column("VICTIM NAME", wide=True),
    Column("CHECKPOINT", wide=True),
)


def preemption_rows(plans: list[dict[str, Any]]) -> list[list[str]]:
    """One line per victim; a plan without victims still gets its line."""
    rows = []
    for plan in plans:
        for victim in plan["victims"] or [{}]:
            job_id = victim.get("job_id")
            rows.append([
                short(plan["preemptor_job_id"]), plan["state"], short(job_id),
                victim.get("outcome") or victim.get("state") or "-",
                age(victim.get("acked_at")),
                gpu_time(victim.get("lost_gpu_seconds") or 0.0),
                plan["plan_id"], plan["preemptor_queue"], victim_gpus(victim),
                victim.get("job_name") or "-",
                victim.get("checkpoint_uri") or "-",
            ])
    return rows


def victim_gpus(victim: dict[str, Any]) -> str:
    """What the victim stops: its GPUs, or a GPU share's fraction of one (its `gpus` are 0)."""
    if victim.get("gpu_share"):
        return f"{victim['gpu_share']:g} of 1"
    return str(victim["gpus"]) if "gpus" in victim else "-"


@handled
def preemptions(
    job: Annotated[str | None, typer.Option(help="Plans with this job as preemptor or victim.")] = None,
    open_only: Annotated[bool, typer.Option("--open", help="Only plans in progress.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="At most this many.")] = 50,
    output: OutputOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Preemption sagas, newest first, one line per victim: the preemptor and victim as short
    ids, the outcome, when it acknowledged, the work it lost."""
    from rota.contracts import messages as m
    from rota.contracts.subjects import PREEMPTION_PLANS
    from rota.settings import get_settings

    plans: list[dict[str, Any]] = call(
        get_settings(), PREEMPTION_PLANS,
        m.ListPreemptions(job_id=job, open=open_only, limit=limit),
    )
    if json_out:
        emit_json(plans)
        return
    if not plans:
        console.print("no preemptions")
        return
    print_table(console, PREEMPTION_COLUMNS, preemption_rows(plans), wide=output is Output.wide)


ALLOCATION_COLUMNS = (
    Column("JOB", whole=True), Column("TEAM"), Column("QUEUE"), Column("GPUS", whole=True),
    Column("BORROWED", whole=True), Column("AGE", whole=True), Column("PLACEMENT"),
    Column("RUN", wide=True), Column("JOB ID", wide=True), Column("GRANTED", wide=True),
)


def allocation_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    """One line per run: its job's short id, the grant's age, where its GPUs are (cut to fit;
    whole with `-o wide`, beside the full ids and the grant's time)."""
    return [[
        short(row["job_id"]), row["team"], row["queue"], str(row["gpus"]),
        str(row["borrowed_gpus"]), age(row["granted_at"]),
        " ".join(f"{p['node']}[{','.join(map(str, p['gpus']))}]" for p in row["placement"]),
        row["run_id"], row["job_id"], moment(row["granted_at"]),
    ] for row in rows]


@handled
def allocations(
    all_runs: Annotated[bool, typer.Option("--all", help="Released ones too, newest first.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=100_000, help="At most this many.")] = 1000,
    output: OutputOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The ledger's allocations, one line per run: which job holds how many GPUs, how many
    are borrowed, since when, and where."""
    from rota.contracts import messages as m
    from rota.contracts.subjects import LEDGER_ALLOCATIONS
    from rota.settings import get_settings

    result: dict[str, Any] = call(get_settings(), LEDGER_ALLOCATIONS,
                                  m.ListAllocations(active_only=not all_runs, limit=limit))
    rows = result["allocations"]
    if json_out:
        emit_json(result)
        return
    if not rows:
        console.print("no allocations")
        return
    print_table(console, ALLOCATION_COLUMNS, allocation_rows(rows), wide=output is Output.wide)
