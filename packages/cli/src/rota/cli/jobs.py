"""`rota submit`, `rota jobs`, `rota job`, `rota cancel`, `rota queues`."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rota import waits
from rota.cli.client import call
from rota.cli.columns import Column, Output, OutputOpt, print_table
from rota.cli.output import InvalidInput, console, emit_json, handled
from rota.cli.untrusted import untrusted
from rota.formats import age, moment, parse_time, score, short

if TYPE_CHECKING:  # the contracts (pydantic models, ~100 ms) load in the commands using them
    from rota.contracts import messages as m

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


JOB_ID_HELP = ("A job id, its short id (the JOB column of `rota jobs`), or 8+ of its first or"
               " last characters.")


def _parse_labels(labels: list[str]) -> dict[str, str]:
    parsed: dict[str, str] = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidInput(f"{item!r} is not KEY=VALUE", "labels")
        parsed[key] = value
    return parsed


def _gang_shape(gpus: int, flavor: str) -> tuple[int, int]:
    """Split a total GPU count into whole nodes of the flavor's node size."""
    from rota.config import ConfigError, load_config
    from rota.settings import get_settings

    try:
        node_gpus = load_config(get_settings().config).max_node_gpus(flavor) or 8
    except ConfigError:
        node_gpus = 8
    workers = max(1, math.ceil(gpus / node_gpus))
    if gpus % workers:
        raise InvalidInput(
            f"{gpus} GPUs do not split evenly over {workers} nodes of {node_gpus};"
            " give --workers and --gpus-per-worker", "gpus",
        )
    return workers, gpus // workers


def build_spec(doc: dict[str, Any]) -> m.SubmitJob:
    from rota.contracts import messages as m

    return m.SubmitJob.model_validate(doc)


@handled
def submit(
    file: Annotated[Path | None, typer.Option("-f", "--file", help="A job spec in YAML.")] = None,
    name: Annotated[str | None, typer.Option(help="Job name.")] = None,
    team: Annotated[str | None, typer.Option(help="Your team.")] = None,
    user: Annotated[str | None, typer.Option(envvar="ROTA_USER", help="Your user name.")] = None,
    queue: Annotated[str | None, typer.Option(help="production, training or experiment.")] = None,
    flavor: Annotated[str | None, typer.Option(help="GPU flavor, e.g. h100.")] = None,
    flavors: Annotated[str | None, typer.Option(
        help="Every flavor it accepts, preferred first, comma-separated, e.g. h100,a100 or"
        " h100,any ('any' last: every other flavor). The first is --flavor.")] = None,
    gpus: Annotated[int | None, typer.Option(help="Total GPUs; split into whole nodes.")] = None,
    workers: Annotated[int | None, typer.Option(help="Gang size (workers).")] = None,
    gpus_per_worker: Annotated[int | None, typer.Option(help="GPUs per worker.")] = None,
    gpu_share: Annotated[float | None, typer.Option(
        help="A share of one GPU: 0.25, 0.5 or 0.75 (one worker of one GPU, on a flavor with"
        " shareable: true).")] = None,
    resumable: Annotated[bool | None, typer.Option(
        "--resumable/--not-resumable", help="Can it resume from a checkpoint?")] = None,
    runtime: Annotated[int | None, typer.Option(
        "--runtime", help="Declared runtime in seconds (helps backfill and ETAs).")] = None,
    rack: Annotated[str | None, typer.Option(help="required, preferred or none.")] = None,
    topology_required: Annotated[str | None, typer.Option(
        help="A topology level all workers must share, e.g. rack or block.")] = None,
    topology_preferred: Annotated[str | None, typer.Option(
        help="A topology level tried first, then each level outward of it.")] = None,
    label: Annotated[list[str] | None, typer.Option(help="KEY=VALUE; repeatable.")] = None,
    submission_id: Annotated[str | None, typer.Option(
        help="Idempotency key: resubmitting it returns the same job. Random if unset.")] = None,
    sim_duration: Annotated[float | None, typer.Option(help="Simulated run length (s).")] = None,
    command: Annotated[list[str] | None, typer.Option(
        "--command", help="Local executor: one argv item per flag.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Submit a job and print its id. Flags override the fields of `-f FILE`."""
    import yaml

    from rota.contracts import subjects as s
    from rota.settings import get_settings

    doc: dict[str, Any] = {}
    if file is not None:
        try:
            loaded = yaml.safe_load(file.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise InvalidInput(f"cannot read {file}: {exc}", "file") from None
        if not isinstance(loaded, dict):
            raise InvalidInput(f"{file} must hold a YAML mapping", "file")
        doc.update(loaded)
    flags = {"name": name, "team": team, "user": user, "queue": queue, "flavor": flavor,
             "workers": workers, "gpus_per_worker": gpus_per_worker, "resumable": resumable,
             "declared_runtime_s": runtime, "rack": rack, "submission_id": submission_id}
    doc.update({k: v for k, v in flags.items() if v is not None})
    if flavors is not None:
        listed = [f.strip() for f in flavors.split(",") if f.strip()]
        if not listed:
            raise InvalidInput("names no flavor", "flavors")
        doc["flavors"] = listed
        doc.setdefault("flavor", listed[0])
    if topology_required is not None or topology_preferred is not None:
        asked = {"required": topology_required, "preferred": topology_preferred}
        doc["topology"] = {**doc.get("topology", {}), **{k: v for k, v in asked.items() if v is not None}}
    if label:
        doc["labels"] = {**doc.get("labels", {}), **_parse_labels(label)}
    if gpus is not None:
        if workers is not None or gpus_per_worker is not None:
            raise InvalidInput("give --gpus, or --workers with --gpus-per-worker, not both", "gpus")
        if gpus < 1:
            raise InvalidInput("must be >= 1", "gpus")
        doc["workers"], doc["gpus_per_worker"] = _gang_shape(gpus, str(doc.get("flavor", "")))
    if gpu_share is not None:
        if gpus not in (None, 1):
            raise InvalidInput("a share is of one GPU: give --gpu-share without --gpus", "gpu_share")
        doc["gpu_share"] = gpu_share
        doc.setdefault("workers", 1)
        doc.setdefault("gpus_per_worker", 1)
    if sim_duration is not None:
        doc["sim"] = {**doc.get("sim", {}), "duration_s": sim_duration}
    if command:
        doc["local"] = {**doc.get("local", {}), "command": command}
    doc.setdefault("submission_id", str(uuid.uuid4()))
    for required in ("name", "team", "user", "queue", "flavor"):
        if required not in doc:
            raise InvalidInput(f"is required (--{required.replace('_', '-')})", required)
    spec = build_spec(doc)
    result = call(get_settings(), s.api_submit(spec.team), spec)
    if json_out:
        emit_json(result)
    else:
        note = " (already submitted)" if result["duplicate"] else ""
        console.print(untrusted(f"{result['job_id']}{note}"), highlight=False)


JOB_COLUMNS = (
    Column("JOB", whole=True), Column("NAME"), Column("TEAM"), Column("QUEUE", whole=True),
    Column("GPUS", whole=True), Column("STATE", whole=True), Column("AGE", whole=True),
    Column("WHY"),
    Column("USER", wide=True), Column("SUBMITTED", wide=True), Column("JOB ID", wide=True),
    Column("RESUME FROM", wide=True),
)


def job_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    lines = []
    for row in rows:
        wait = row.get("wait") or {}
        reasons = wait.get("reasons") or []
        why = waits.title(reasons[0]["code"]) if reasons else (row.get("detail") or "")
        lines.append([
            short(row["job_id"]), row["name"], row["team"], row["queue"],
            f"{gpus_shown(row)} {row['flavor']}", row["state"], age(row["submitted_at"]), why,
            row.get("user_name") or "-", moment(row["submitted_at"]),
            row["job_id"], row.get("resume_from") or "-",
        ])
    return lines


def gpus_shown(row: dict[str, Any]) -> str:
    """A job's GPUs as its row reads them: a count, or a GPU share as a fraction of one."""
    share = row.get("gpu_share")
    return f"{share:g} of 1" if share else str(row["gpus"])


@handled
def jobs(
    team: Annotated[str | None, typer.Option(help="Only this team.")] = None,
    queue: Annotated[str | None, typer.Option(help="Only this queue.")] = None,
    state: Annotated[str | None, typer.Option(help="Only this state, e.g. pending.")] = None,
    user: Annotated[str | None, typer.Option(
        "--user", "-u", help="Only this user's jobs (as squeue -u).")] = None,
    name: Annotated[str | None, typer.Option(
        "--name", "-n", help="Only the jobs of this name (as squeue -n).")] = None,
    search: Annotated[str | None, typer.Option(
        help="Only jobs whose name contains this (any case), or whose id starts or ends with it.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many, newest first.")] = 100,
    offset: Annotated[int | None, typer.Option(
        help="Skip this many of the newest first: the next page is --offset LIMIT.")] = None,
    output: OutputOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """List jobs, newest first: one line each; JOB is the short id every command takes."""
    from rota.contracts import messages as m
    from rota.contracts import subjects as s
    from rota.settings import get_settings

    filters = {"team": team, "queue": queue, "state": state, "user": user, "name": name,
               "search": search, "limit": limit, "offset": offset}
    query = m.ListJobs.model_validate({k: v for k, v in filters.items() if v is not None})
    rows: list[dict[str, Any]] = call(get_settings(), s.API_JOBS_LIST, query)
    if json_out:
        emit_json(rows)
    elif rows:
        print_table(console, JOB_COLUMNS, job_rows(rows), wide=output is Output.wide)
    else:
        console.print("no jobs")


def fetch_job(job_id: str) -> dict[str, Any]:
    from rota.contracts import messages as m
    from rota.contracts import subjects as s
    from rota.settings import get_settings

    result: dict[str, Any] = call(get_settings(), s.API_JOB_GET, m.GetJob(job_id=job_id))
    return result


@handled
def job(
    job_id: Annotated[str, typer.Argument(help=JOB_ID_HELP)],
    json_out: JsonOpt = False,
) -> None:
    """Show one job: its state, placement in the queue and why it waits."""
    row = fetch_job(job_id)
    if json_out:
        emit_json(row)
        return
    for key in ("job_id", "name", "team", "user_name", "queue", "flavor", "workers",
                "gpus_per_worker", "gpus", "gpu_share", "state", "submission_id", "submitted_at",
                "started_at", "ended_at", "attempts", "run_id", "resume_from", "detail"):
        if row.get(key) is not None:
            value = moment(row[key]) if key.endswith("_at") else row[key]
            console.print(f"[bold]{key:>16}[/bold]  {untrusted(value)}", highlight=False)
    wait = row.get("wait") or {}
    for reason in wait.get("reasons") or []:
        console.print(f"[bold]{'waiting':>16}[/bold]  {untrusted(waits.title(reason['code']))}:"
                      f" {untrusted(reason['message'])}", highlight=False)
    if wait.get("eta"):
        console.print(f"[bold]{'eta':>16}[/bold]  {untrusted(moment(wait['eta']))}")


@handled
def cancel(
    job_id: Annotated[str, typer.Argument(help=JOB_ID_HELP)],
    reason: Annotated[str, typer.Option(help="Recorded with the cancellation.")] = "cancelled by user",
    json_out: JsonOpt = False,
) -> None:
    """Cancel a job. Cancelling a finished or cancelled job changes nothing."""
    from rota.contracts import messages as m
    from rota.contracts import subjects as s
    from rota.settings import get_settings

    row = fetch_job(job_id)
    command = m.CancelJob(job_id=row["job_id"], team=row["team"], reason=reason)
    result = call(get_settings(), s.api_cancel(row["team"]), command)
    if json_out:
        emit_json(result)
    else:
        console.print(untrusted(f"{result['job_id']} {result['state']}"), highlight=False)


QUEUE_COLUMNS = (
    Column("QUEUE", whole=True), Column("TEAM"), Column("FLAVOR"),
    Column("PENDING", whole=True), Column("RUNNING", whole=True),
    Column("GPUS/QUOTA", whole=True), Column("BORROWED", whole=True),
    Column("WAITING", whole=True),
)
BUDGET_COLUMNS = (Column("BUDGET", whole=True), Column("GPU-HOURS/BUDGET", wide=True),
                  Column("RESETS", wide=True))
OLDEST_COLUMN = Column("OLDEST PENDING", wide=True)


@handled
def queues(
    team: Annotated[str | None, typer.Option(help="Only this team.")] = None,
    output: OutputOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Per queue and team: pending jobs (and their GPUs), running jobs, GPUs in use against
    quota, borrowed, how long the oldest pending job has waited, and the share of the team's
    GPU-hour budget of the flavor used this period (wide: the figures and when it resets)."""
    from rota.contracts import messages as m
    from rota.contracts import subjects as s
    from rota.settings import get_settings

    rows: list[dict[str, Any]] = call(
        get_settings(), s.API_QUEUES_SUMMARY, m.SummarizeQueues(team=team)
    )
    if json_out:
        emit_json(rows)
        return
    if not rows:
        console.print("no pending or running jobs")
        return
    budgets = any(row.get("budget_gpu_hours") for row in rows)
    columns = (*QUEUE_COLUMNS, *(BUDGET_COLUMNS if budgets else ()), OLDEST_COLUMN)
    lines = []
    for row in rows:
        cells = [row["queue"], row["team"], row["flavor"],
                 f"{row['pending_jobs']} ({row['pending_gpus']:g})", str(row["running_jobs"]),
                 f"{row['gpus_in_use']:g}/{row['quota']:g}", f"{row['borrowed_gpus']:g}",
                 age(row["oldest_pending_at"])]
        if budgets:
            cells.extend(_budget_cells(row))
        lines.append([*cells, moment(row["oldest_pending_at"])])
    print_table(console, columns, lines, wide=output is Output.wide)


def _budget_cells(row: dict[str, Any]) -> list[str]:
    if not row.get("budget_gpu_hours"):
        return ["-", "-", "-"]
    used, budget = row["budget_used_gpu_hours"], row["budget_gpu_hours"]
    return [f"{used / budget:.0%}", f"{used:,.0f}/{budget:,.0f}",
            moment(row["budget_resets_at"])]


@handled
def why(
    job_id: Annotated[str, typer.Argument(help=JOB_ID_HELP)],
    json_out: JsonOpt = False,
) -> None:
    """Why a job waits: every reason (primary first), its ETA and its score factors."""
    from rota.contracts import messages as m
    from rota.contracts import subjects as s
    from rota.settings import get_settings

    answer: dict[str, Any] = call(get_settings(), s.API_JOB_WHY, m.GetJob(job_id=job_id))
    if json_out:
        emit_json(answer)
        return
    share = f", {answer['gpu_share']:g} of one GPU" if answer.get("gpu_share") else ""
    console.print(f"[bold]{untrusted(answer['name'])}[/bold] " + untrusted(
        f"{answer['job_id']} — {answer['state']} in {answer['queue']} ({answer['team']}{share})"),
        highlight=False)
    if answer["state"] != "pending":
        console.print(f"  {untrusted(answer['summary'])}", highlight=False)
        return
    print_wait(answer, datetime.now(UTC))


def print_wait(answer: dict[str, Any], now: datetime) -> None:
    """A pending job's reasons in the user's words (the codes are in --json), when each hold
    ends, the ETA and the position, and the score as of now."""
    for i, reason in enumerate(answer["reasons"]):
        label = "because" if i == 0 else "also"
        code = str(reason.get("code", ""))
        console.print(f"  {label:>7}  [bold]{untrusted(reason.get('title') or waits.title(code))}"
                      f"[/bold]: {untrusted(reason['message'])}", highlight=False)
        ends = parse_time(reason.get("ends_at"))
        if ends is not None:
            console.print(untrusted(f"    until  {moment(ends)} ({waits.relative(ends, now)})"),
                          highlight=False)
    eta = parse_time(answer.get("eta"))
    if eta is not None:
        basis = waits.eta_basis(answer["reasons"])
        shown = f"{moment(eta)} ({waits.relative(eta, now)})" + (f", {basis}" if basis else "")
    else:  # never a bare "unknown": the reason above says what it waits for
        shown = f"not estimated: {waits.no_eta(answer['reasons'])}"
    place = answer.get("position")
    queue = f" in the {answer['flavor']} queue" if answer.get("flavor") else ""
    console.print(untrusted(f"      eta  {shown}"
                            + (f"   (position {place}{queue})" if place else "")),  # 0: out of line
                  highlight=False)
    factors = answer.get("factors") or {}
    if factors:
        console.print("    score  " + untrusted(score(factors)),
                      highlight=False)
    if answer.get("resume_from"):
        console.print(f"   resume  {untrusted(answer['resume_from'])}", highlight=False)
    if answer.get("requeued"):
        console.print(f"    drain  {untrusted(answer['requeued'])}", highlight=False)
    if answer.get("fresh") is False:
        console.print("     note  the scheduler did not answer in time: this is the explanation it"
                      " last published", highlight=False)


@handled
def trace(
    job_id: Annotated[str, typer.Argument(help=JOB_ID_HELP)],
    json_out: JsonOpt = False,
) -> None:
    """A job's decision record: every event and decision with times, the reasons and score
    factors at each decision, the preemptions it caused or suffered, the notifications sent."""
    import asyncio

    from rota.cli import record
    from rota.contracts import messages as m
    from rota.contracts import subjects as s
    from rota.settings import get_settings

    settings = get_settings()
    result: dict[str, Any] = call(settings, s.API_JOB_TRACE, m.GetJob(job_id=job_id))
    result["notifications"], error = asyncio.run(
        record.notifications(settings, result["job"]["job_id"]))
    if error is not None:
        result["notifications_error"] = error
    if json_out:
        emit_json(result)
        return
    record.print_record(result)
