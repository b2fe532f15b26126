"""`rota replay`: a trace through the policy (or a baseline) on a virtual clock.

Progress goes to stderr (rich); results go to stdout, and to --json / --plot files.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from rota.cli.output import emit_json, fail
from rota.cli.untrusted import untrusted

__all__ = ["convert_trace_command", "replay_command"]

_err = Console(stderr=True)
_out = Console()


class TraceFormat(StrEnum):
    philly = "philly"
    rota_csv = "rota-csv"


class PolicyName(StrEnum):
    rota = "rota"
    fifo = "fifo"
    kueue = "kueue"
    slurm = "slurm"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4f}" if abs(value) < 10 else f"{value:,.0f}"
    return str(value)


def _flat(value: Any, prefix: str) -> dict[str, Any]:
    """Nested figures (`eta_by_reason.QUOTA_EXCEEDED.p50`) as one row each."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, inner in value.items():
        out.update(_flat(inner, f"{prefix}.{key}"))
    return out


def _table(results: list[dict[str, Any]], title: str) -> Table:
    table = Table(title=title)
    table.add_column("metric")
    for r in results:
        table.add_column(str(r["policy"]), justify="right")
    flat = [{k: v for key, value in r.items() if key != "policy" for k, v in _flat(value, key).items()}
            for r in results]
    rows: dict[str, None] = {}
    for figures in flat:  # in the first result's order, then what only others have
        rows.update(dict.fromkeys(figures))
    for row in rows:
        # A figure a policy has none of (a reason it never gave, a None): "-".
        table.add_row(row, *(_fmt(f[row]) if f.get(row) is not None else "-" for f in flat))
    return table


def replay_command(
    trace: Annotated[Path, typer.Option("--trace", help="Trace file.", exists=True, dir_okay=False)],
    scenario: Annotated[
        str, typer.Option("--scenario", help="philly-768, philly-512, philly-1152, or a scenario YAML path.")
    ] = "philly-768",
    policy: Annotated[PolicyName, typer.Option("--policy", help="Policy to replay.")] = PolicyName.rota,
    compare: Annotated[bool, typer.Option("--compare", help="Replay all four policies.")] = False,
    trace_format: Annotated[TraceFormat, typer.Option("--format", help="Trace format.")] = TraceFormat.philly,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the results as JSON here.")] = None,
    plot_out: Annotated[Path | None, typer.Option("--plot", help="Write a PNG figure here.")] = None,
    eta_probes: Annotated[
        bool,
        typer.Option(
            "--eta-probes",
            help="Also measure the ETA 10 minutes before each start, and what squeue --start would"
            " print at submission and then: each policy is replayed twice, the second pass asking"
            " about each job at that moment.",
        ),
    ] = False,
    first_flavor: Annotated[
        bool,
        typer.Option(
            "--first-flavor",
            help="Each job accepts only the first flavor it lists: flavor fallback off, to compare"
            " on the same jobs.",
        ),
    ] = False,
    whole_gpus: Annotated[
        bool,
        typer.Option(
            "--whole-gpus",
            help="Each job that asks for a share of a GPU asks for that GPU whole: GPU shares off,"
            " to compare on the same jobs.",
        ),
    ] = False,
    rigid: Annotated[
        bool,
        typer.Option(
            "--rigid",
            help="Each elastic gang runs as a rigid gang of its max, the size the trace recorded"
            " (as the baselines always do): elasticity off, to compare on the same jobs.",
        ),
    ] = False,
) -> None:
    """Replay a GPU-cluster trace through Rota's policy (or a baseline) on a virtual clock."""
    from rota_replay.replay import POLICY_NAMES, PROBE_LABEL, freeze_heap, load, replay_run
    from rota_replay.rotacsv import TraceFormatError

    policies = POLICY_NAMES if compare else (policy.value,)
    with _err.status(f"loading {trace} and scenario {scenario}"):
        try:
            jobs, config = load(trace, scenario, trace_format.value)
        except TraceFormatError as exc:
            _err.print(f"[red]{untrusted(f'{trace}: {exc}')}[/red]")
            raise typer.Exit(2) from None
    if whole_gpus:
        from rota_replay.hetero import whole_gpus as without_shares

        jobs = without_shares(jobs)
    freeze_heap()
    runs = []
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}% of jobs submitted"),
        TimeElapsedColumn(),
        console=_err,
    ) as bar:
        labels = [label for p in policies for label in (p, f"{p} {PROBE_LABEL}")[: 1 + eta_probes]]
        tasks: dict[str, TaskID] = {label: bar.add_task(label, total=1.0) for label in labels}

        def progress(name: str, fraction: float) -> None:
            bar.update(tasks[name], completed=fraction)

        for name in policies:
            runs.append(replay_run(jobs, config, name, progress=progress, eta_probes=eta_probes,
                                   first_flavor=first_flavor, rigid=rigid))
    results = [run.result for run in runs]
    _out.print(_table(results, f"{trace.name} on {scenario}: {len(jobs):,} jobs"))
    if json_out is not None:
        payload: Any = results if compare else results[0]
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(payload, indent=2) + "\n")
        _err.print(f"wrote {json_out}")
    if plot_out is not None:
        from rota_replay.plot import plot_runs

        plot_runs(runs, plot_out, f"{trace.name} on {scenario}")
        _err.print(f"wrote {plot_out}")


def convert_trace_command(
    trace: Annotated[Path, typer.Option("--trace", help="A Philly trace CSV.", exists=True, dir_okay=False)],
    out: Annotated[Path, typer.Option("--out", help="Where to write the rota-csv trace.")],
    hetero: Annotated[
        bool,
        typer.Option(
            "--hetero",
            help="Give each job the flavors of the philly-hetero rule (a100, v100, t4; 30% accept"
            " two) and print that scenario's team quotas.",
        ),
    ] = False,
    shares: Annotated[
        bool,
        typer.Option(
            "--shares",
            help="With --hetero: 20% of the 1-GPU experiment jobs ask for half a GPU (a fixed rule;"
            " `rota replay --whole-gpus` gives them their GPU whole, for a comparison).",
        ),
    ] = False,
    elastic: Annotated[
        bool,
        typer.Option(
            "--elastic",
            help="With --hetero: 30% of multi-worker training jobs become elastic gangs of half"
            " their workers to all of them (`min-max` in the workers column; a fixed rule:"
            " `rota replay --rigid` runs them rigid, for a comparison).",
        ),
    ] = False,
    elastic_draw: Annotated[
        int,
        typer.Option(
            "--elastic-draw",
            min=0,
            max=9,
            help="With --elastic: which 30% of the training gangs become elastic. 0 is the"
            " rule's own (every 10 gangs in trace order, the 3rd, 6th and 9th); d takes those"
            " d places later, to see how much a result owes to the few jobs picked.",
        ),
    ] = 0,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print what was written as JSON: the file, the job counts"
                     " and, with --hetero, the quotas."),
    ] = False,
) -> None:
    """Write a Philly trace in the rota-csv format (`rota replay --format rota-csv`)."""
    from rota_replay.hetero import hetero_jobs, hetero_quotas, hetero_shares
    from rota_replay.rotacsv import write_rota_csv
    from rota_replay.workload import load_philly

    if shares and not hetero:
        fail("--shares needs --hetero (the flavors that allow shares)", code=2, json_out=json_out,
             field="shares")
    if elastic_draw and not elastic:
        fail("--elastic-draw needs --elastic (it picks which gangs are elastic)", code=2,
             json_out=json_out, field="elastic_draw")
    jobs = load_philly(trace)
    if hetero:
        jobs = hetero_jobs(jobs, elastic=elastic, elastic_draw=elastic_draw)
    if shares:
        jobs = hetero_shares(jobs)
    count = write_rota_csv(jobs, out)
    _err.print(f"wrote {count:,} jobs to {out}")
    if json_out:
        emit_json({
            "ok": True, "out": str(out), "jobs": count,
            "accepting_several_flavors": sum(1 for j in jobs if len(j.flavors) > 1),
            "shares": sum(1 for j in jobs if j.share), "elastic": sum(1 for j in jobs if j.elastic),
            "quotas": hetero_quotas(jobs) if hetero else None,
        })
    elif hetero:
        _out.print("teams:")
        for team, quotas in hetero_quotas(jobs).items():
            inner = ", ".join(f"{flavor}: {gpus}" for flavor, gpus in quotas.items())
            _out.print(untrusted(f'  "{team}": {{quota: {{{inner}}}}}'))
