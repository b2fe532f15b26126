"""`rota up`: embedded (or given) NATS and PostgreSQL, migrations, and the six services.

It supervises the services and the embedded servers: one that dies is restarted with backoff,
a server on its same port (or socket) and data, so the services reconnect by themselves. On
Ctrl-C or SIGTERM it stops everything within 10 s: services first, so they drain, then the
servers.
"""

from __future__ import annotations

import functools
import signal
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rota.cli.columns import Column, Output, OutputOpt, print_table
from rota.cli.output import InvalidInput, emit_json, err_console, handled
from rota.cli.running import Executor, Stack
from rota.cli.stack import REPLICABLE, parse_replicas
from rota.cli.untrusted import plain, untrusted

if TYPE_CHECKING:
    from rota.settings import Settings


class Stopped(Exception):
    """Ctrl-C or SIGTERM arrived."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    # `uv run` forwards the signal it gets, so a stop often arrives twice; a second one
    # must not interrupt the cleanup the first one started.
    ignore_signals()
    raise Stopped()


@contextmanager
def stopping_on_signals() -> Iterator[None]:
    """SIGINT/SIGTERM raise `Stopped` inside the block; during cleanup they are ignored."""
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except Stopped:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def ignore_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


ReplicasOpt = Annotated[str | None, typer.Option(
    help="Run services as several replicas, e.g. submission=2,executor=2 (replicable: "
    f"{', '.join(REPLICABLE)}; the scheduler and the coordinator are singletons).")]


def replica_counts(text: str | None) -> dict[str, int]:
    try:
        return parse_replicas(text)
    except ValueError as exc:
        raise InvalidInput(str(exc), field="replicas") from None


def with_nats_cluster(settings: Settings, servers: int | None) -> Settings:
    """`settings` for `--nats-cluster`: that many embedded servers and, unless the streams'
    replicas were set, streams of min(3, servers) replicas."""
    servers = servers or settings.nats_cluster
    if servers > 1 and settings.nats_url:
        raise InvalidInput("--nats-cluster starts embedded servers; ROTA_NATS_URL names a NATS "
                           "of your own", field="nats_cluster")
    update: dict[str, Any] = {"nats_cluster": servers}
    if servers > 1 and "stream_replicas" not in settings.model_fields_set:
        update["stream_replicas"] = min(3, servers)
    return settings.model_copy(update=update)


@handled
def up(
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="rota.yaml; the shipped example if omitted.")] = None,
    executor: Annotated[Executor, typer.Option(
        help="sim: a simulated cluster; local: real processes on this host; kubernetes: one "
        "Indexed Job per run on the cluster of --kubeconfig.")] = Executor.sim,
    kubeconfig: Annotated[Path | None, typer.Option(
        help="The cluster's kubeconfig (--executor kubernetes).")] = None,
    kube_context: Annotated[str | None, typer.Option(
        help="A context of the kubeconfig; its current one if omitted.")] = None,
    replicas: ReplicasOpt = None,
    nats_cluster: Annotated[int | None, typer.Option(
        "--nats-cluster", min=1, max=5,
        help="Embedded nats-servers, clustered on loopback when more than 1 (ROTA_NATS_CLUSTER):"
        " 3 keeps every stream at 3 replicas (unless ROTA_STREAM_REPLICAS says otherwise), so "
        "that one server may be lost.")] = None,
    output: OutputOpt = None,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the endpoints and service states as one JSON object.")] = False,
) -> None:
    """Start Rota: NATS, PostgreSQL, migrations and the six services, until Ctrl-C."""
    from rota.config import load_config
    from rota.settings import get_settings

    counts = replica_counts(replicas)
    settings = with_nats_cluster(get_settings(), nats_cluster)
    config = config or settings.config
    load_config(config)  # fail fast, exit 2, before starting anything
    extra: dict[str, str] = {}
    if executor is Executor.kubernetes:
        kubeconfig = kubeconfig or settings.kubeconfig
        if kubeconfig is None or not kubeconfig.is_file():
            raise InvalidInput("the kubernetes executor needs a kubeconfig file"
                               f"{f' ({kubeconfig} is not one)' if kubeconfig else ''}",
                               field="kubeconfig")
        extra["ROTA_KUBECONFIG"] = str(kubeconfig.resolve())
        if kube_context:
            extra["ROTA_KUBE_CONTEXT"] = kube_context
    stack = Stack(settings, config, executor, extra_env=extra, replicas=counts,
                  say=lambda text: err_console.print(f"rota up: {untrusted(text)}"))
    with stopping_on_signals():
        try:
            summary = stack.start()
            if json_out:
                emit_json(summary, compact=True)  # one line, so a supervisor can read it
            else:
                print_summary(summary, wide=output is Output.wide)
            _supervise(stack)
        finally:
            ignore_signals()
            stack.stop()


SERVICE_COLUMNS = (Column("SERVICE", whole=True), Column("STATE", whole=True),
                   Column("PID", whole=True), Column("METRICS", whole=True),
                   Column("LOG", wide=True))


def print_summary(summary: Mapping[str, Any], *, wide: bool = False) -> None:
    """The endpoints, one per line and whole (they are there to be copied), then one line per
    service; the log paths, long, only with `-o wide`: the directory says where they are."""
    services: Mapping[str, Any] = summary["services"]
    say = functools.partial(err_console.print, highlight=False, soft_wrap=True)
    say(f"NATS      {summary['nats_url']} ({summary['nats']}, auth {summary['nats_auth']})")
    say(f"Database  {summary['database_url']} ({summary['database']})")
    say(f"Executor  {summary['executor']}")
    if replicated := summary.get("replicas"):
        say("Replicas  " + ", ".join(f"{name}={count}" for name, count in replicated.items()))
    logs = {str(Path(info["log"]).parent) for info in services.values()}
    if not wide and len(logs) == 1:
        say(f"Logs      {logs.pop()}/<service>.log")
    print_table(err_console, SERVICE_COLUMNS, [
        [name, info["state"], str(info["pid"]), info["metrics"] or "-", info["log"]]
        for name, info in services.items()], wide=wide)
    if (console := summary.get("console")) is not None:
        say(f"Console   {console['url']} ({console['state']})")
        if login := console.get("login"):
            say(f"Log in    {login}")
    say("Rota is up. Ctrl-C stops it.")


def _supervise(stack: Stack) -> None:
    next_start: dict[str, float] = {}
    next_server_start: dict[str, float] = {}
    while True:
        time.sleep(0.5)
        # The servers first: a service that died with its server comes back to a live one.
        for line in stack.restart_dead_servers(next_server_start):
            err_console.print(f"rota up: {plain(line)}", markup=False, highlight=False,
                              soft_wrap=True)
        for name in stack.restart_dead(next_start):
            err_console.print(f"rota up: {name} exited; restarted")
