"""`rota bench`: measured figures, printed as JSON (and written to `--json OUT`)."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rota.cli.output import emit_json, err_console, handled
from rota.cli.running import Executor, Stack
from rota.cli.stack import SERVICES
from rota.cli.up import ReplicasOpt, ignore_signals, replica_counts, stopping_on_signals

if TYPE_CHECKING:
    from rota.settings import Settings

bench_app = typer.Typer(help="Benchmarks: figures as JSON, not timed tests.", no_args_is_help=True)


@bench_app.command("e2e")
@handled
def e2e(
    jobs: Annotated[int, typer.Option(min=1, help="Jobs to submit.")] = 2000,
    rate: Annotated[float | None, typer.Option(
        help="Offered jobs/s; unset submits as fast as JetStream acks.")] = None,
    pending: Annotated[int, typer.Option(
        min=0, help="First submit this many jobs that wait (a deep queue ahead of the measured"
        " ones), and measure the scheduler's idle CPU, RSS and the list API with them.")] = 0,
    burst: Annotated[int | None, typer.Option(
        min=1, help="Publish this many jobs at once, as a sweep does (instead of --jobs and"
        " --rate), and report when the last was recorded and granted.")] = None,
    backlog_nodes: Annotated[int, typer.Option(
        min=1, help="8-GPU nodes of the flavor the --pending backlog waits on (16 as"
        " shipped; 1250 for a large cluster that the backlog fills).")] = 16,
    replicas: ReplicasOpt = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the figures here.")] = None,
) -> None:
    """Submit -> AllocationGranted throughput and p50/p99 latency on the live stack (sim
    executor, embedded servers under ROTA_HOME/bench), against the JetStream ceiling, with
    each service's CPU seconds per job."""
    from rota.bench.e2e import config_with_backlog_nodes, run
    from rota.settings import get_settings

    counts = replica_counts(replicas)
    base = get_settings()
    home = base.home / "bench"
    shutil.rmtree(home, ignore_errors=True)
    settings = base.model_copy(update={"home": home})
    home.mkdir(parents=True)
    config = config_with_backlog_nodes(backlog_nodes, home / "bench.rota.yaml")
    stack = Stack(settings, config, Executor.sim,
                  extra_env={"ROTA_LOG_LEVEL": "WARNING", "ROTA_SIM_SPEED": "1",
                             "ROTA_SCHEDULER_DEBOUNCE_S": "0.02",
                             "ROTA_OUTBOX_POLL_INTERVAL_S": "0.1"},
                  replicas=counts, say=lambda text: err_console.print(f"rota bench: {text}"))
    with stopping_on_signals():
        try:
            stack.start()
            assert stack.endpoints is not None
            pids = {p.name: p.process.pid for p in stack.processes if p.process is not None}
            servers = embedded_server_pids(stack)
            result = asyncio.run(run(stack.endpoints.nats_url, burst or jobs, rate,
                                     progress=lambda t: err_console.print(f"rota bench: {t}"),
                                     creds=stack.endpoints.nats_creds, pending=pending,
                                     burst=burst is not None, pids=pids,
                                     server_pids=servers))
        finally:
            ignore_signals()
            stack.stop()
    figures = {"benchmark": "e2e", **result.as_json(),
               "replicas": {name: counts.get(name, 1) for name in SERVICES},
               **({"backlog_nodes": backlog_nodes} if pending else {})}
    if json_path is not None:
        json_path.write_text(json.dumps(figures, indent=2) + "\n")
    emit_json(figures)


SIM_ENV = {"ROTA_LOG_LEVEL": "WARNING", "ROTA_SIM_SPEED": "1",
           "ROTA_SCHEDULER_DEBOUNCE_S": "0.02", "ROTA_OUTBOX_POLL_INTERVAL_S": "0.1"}
"""The sim stack of `flood`, `feed` and `faults`, as `e2e` runs it."""


def bench_home() -> tuple[Settings, Path]:
    """The settings with ROTA_HOME/bench, emptied, as the home."""
    from rota.settings import get_settings

    base = get_settings()
    home = base.home / "bench"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    return base.model_copy(update={"home": home}), home


def on_stack(settings: Settings, config: Path,
             measure: Callable[[Stack], Coroutine[Any, Any, dict[str, Any]]],
             json_path: Path | None, *, supervise: bool = False) -> None:
    """Start the sim stack, run `measure` against it, stop it, print (and write) the figures.
    `supervise`: restart a service that exits, as `rota up` does (the servers are the
    measure's to restart), and list the restarts in the figures."""
    stack = Stack(settings, config, Executor.sim, extra_env=SIM_ENV,
                  say=lambda text: err_console.print(f"rota bench: {text}"))
    done = threading.Event()
    restarted: list[str] = []

    def supervisor() -> None:
        next_start: dict[str, float] = {}
        while not done.wait(0.5):
            for name in stack.restart_dead(next_start):
                _say(f"{name} exited; restarted")
                restarted.append(name)

    watcher = threading.Thread(target=supervisor, daemon=True)
    with stopping_on_signals():
        try:
            stack.start()
            if supervise:
                watcher.start()
            figures = asyncio.run(measure(stack))
            if supervise:
                figures["services_restarted"] = restarted
        finally:
            done.set()
            if watcher.is_alive():
                watcher.join(5)  # no restart while the stack stops
            ignore_signals()
            stack.stop()
    if json_path is not None:
        json_path.write_text(json.dumps(figures, indent=2) + "\n")
    emit_json(figures)


def _say(text: str) -> None:
    err_console.print(f"rota bench: {text}")


@bench_app.command("flood")
@handled
def flood(
    count: Annotated[int, typer.Option(
        "--flood", min=1, help="Commands team `flood` publishes as fast as JetStream acks.")] = 10_000,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the figures here.")] = None,
) -> None:
    """One team floods the front door while another submits a fitting job every second, with
    the intake limits as shipped (sim executor, embedded servers under ROTA_HOME/bench): the
    flood's accepted and refused commands and rates, and the other team's submit -> recorded
    and submit -> granted p50/p99/max."""
    from rota.bench.flood import CONFIG, run

    async def measure(stack: Stack) -> dict[str, Any]:
        assert stack.endpoints is not None
        return await run(stack.endpoints.nats_url, flood=count,
                         creds=stack.endpoints.nats_creds, progress=_say)

    on_stack(bench_home()[0], CONFIG, measure, json_path)


@bench_app.command("feed")
@handled
def feed(
    jobs: Annotated[int, typer.Option(min=1, help="Jobs to submit.")] = 2000,
    rate: Annotated[float, typer.Option(min=0.1, help="Offered jobs/s.")] = 100.0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the figures here.")] = None,
) -> None:
    """A team's feed against rota.evt on the live stack (sim executor, embedded servers under
    ROTA_HOME/bench): submit -> JobSubmitted on each (p50/p99/max), every event's lag from
    rota.evt to the feed, and feed copies out of order per job."""
    from rota.bench.e2e import config_with_backlog_nodes
    from rota.bench.feed import run

    async def measure(stack: Stack) -> dict[str, Any]:
        assert stack.endpoints is not None
        return await run(stack.endpoints.nats_url, jobs=jobs, rate=rate,
                         creds=stack.endpoints.nats_creds, progress=_say)

    settings, home = bench_home()
    on_stack(settings, config_with_backlog_nodes(16, home / "bench.rota.yaml"), measure,
             json_path)


@bench_app.command("faults")
@handled
def faults(
    jobs: Annotated[int, typer.Option(min=3, help="Jobs per phase.")] = 2000,
    rate: Annotated[float, typer.Option(min=0.1, help="Offered jobs/s.")] = 40.0,
    down_s: Annotated[float, typer.Option(min=0.0, help="How long each killed server stays "
                                          "down before its restart.")] = 3.0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the figures here.")] = None,
) -> None:
    """The live stack on an embedded NATS cluster of 3 (streams at R3) under load, through
    the ROTA_EVT leader's server killed (SIGKILL) and restarted, then PostgreSQL killed and
    restarted: jobs lost, recorded or granted twice, GPUs granted twice, consumers stuck, and
    the stall each fault causes."""
    from rota.bench.e2e import config_with_backlog_nodes
    from rota.bench.faults import run

    async def measure(stack: Stack) -> dict[str, Any]:
        assert stack.endpoints is not None and stack.infra is not None
        assert stack.infra.cluster is not None and stack.infra.postgres is not None
        return await run(stack.infra.cluster, stack.infra.postgres,
                         stack.endpoints.nats_creds, jobs=jobs, rate=rate, down_s=down_s,
                         say=_say)

    settings, home = bench_home()
    settings = settings.model_copy(update={"nats_cluster": 3, "stream_replicas": 3})
    on_stack(settings, config_with_backlog_nodes(16, home / "bench.rota.yaml"), measure,
             json_path, supervise=True)


def embedded_server_pids(stack: Stack) -> dict[str, int]:
    """The embedded NATS server's and PostgreSQL postmaster's pids, for their CPU per job."""
    infra, out = stack.infra, {}
    if infra is not None and infra.nats is not None and infra.nats.process is not None:
        out["nats"] = infra.nats.process.pid
    if infra is not None and infra.postgres is not None and infra.postgres.pid is not None:
        out["postgres"] = infra.postgres.pid
    return out


@bench_app.command("cli")
@handled
def cli(
    runs: Annotated[int, typer.Option(min=1, help="Measured runs of each command.")] = 20,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the figures here.")] = None,
) -> None:
    """How fast the quick commands start: rota submit, jobs, why and --help, each run as a new
    process on the live stack (sim executor, embedded servers under ROTA_HOME/bench, or
    ROTA_NATS_URL/ROTA_DATABASE_URL); wall ms median, p90 and max, the imports' ms (`python -X
    importtime`), and whether bytecode caches were usable."""
    from rota.bench.e2e import CONFIG
    from rota.bench.startup import run

    settings, home = bench_home()

    async def measure(stack: Stack) -> dict[str, Any]:
        return run(home, runs=runs, say=_say)

    on_stack(settings, CONFIG, measure, json_path)


@bench_app.command("core")
@handled
def core(
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the figures here.")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes only (a smoke test).")] = False,
    memory: Annotated[bool, typer.Option("--memory/--no-memory", help="Measure 1M pending.")] = True,
    memory_only: Annotated[bool, typer.Option(
        "--memory-only", help="Only the peak memory with 1M pending (about 2 minutes).")] = False,
) -> None:
    """The pure policy: admissions/s and cycle time at 1k/10k/100k pending on 128 and 1,250
    nodes, and peak memory with 1,000,000 pending."""
    from rota_replay.bench import run_core_bench

    figures = run_core_bench(quick=quick, memory=memory or memory_only, throughput=not memory_only,
                             log=lambda line: err_console.print(line))
    if json_path is not None:
        json_path.write_text(json.dumps(figures, indent=2) + "\n")
    emit_json(figures)


@bench_app.command("replay-speed")
@handled
def replay_speed(
    trace: Annotated[Path, typer.Option(
        "--trace", help="The Philly trace CSV (../shared/data/philly/philly-2017-09-10.csv).",
        exists=True, dir_okay=False)],
    jobs: Annotated[int | None, typer.Option(
        min=1, help="Only the first N jobs of the trace (a smoke test); all unless given.")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the figures here.")] = None,
) -> None:
    """Replay speed with every scheduling feature against the single-flavor replay (the 1.3x
    target): CPU per job of Rota replays of the Philly jobs with every feature on
    philly-hetero-blocks, side by side first with the same jobs there with every feature off,
    then with philly-768; their ratios, and each replay's policy CPU per cycle by queue depth.
    Two processes at a time; about 3 minutes on 2 cores."""
    from rota_replay.speed import replay_speed as measure

    figures = measure(trace, jobs=jobs, log=lambda line: err_console.print(line))
    if json_path is not None:
        json_path.write_text(json.dumps(figures, indent=2) + "\n")
    emit_json(figures)
