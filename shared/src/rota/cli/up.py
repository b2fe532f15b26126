"""`rota up`: embedded (or given) NATS and PostgreSQL, migrations, and the six services.

It supervises the services (a crashed one is restarted with backoff) and, on Ctrl-C or
SIGTERM, stops everything within 10 s: services first, so they drain, then the servers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer
from rich.table import Table

from rota.cli.output import emit_json, err_console, handled
from rota.cli.stack import (
    SERVICES,
    Infrastructure,
    ServiceProcess,
    migrate_all,
    ping_all,
    prepare_streams,
    service_env,
)
from rota.config import load_config
from rota.endpoints import write_runtime_file
from rota.settings import Settings, get_settings

STOP_BUDGET_S = 8.0
READY_TIMEOUT_S = 60.0


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop()


@handled
def up(
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="rota.yaml; the shipped example if omitted.")] = None,
    json_out: Annotated[bool, typer.Option(
        "--json", help="Print the endpoints and service states as one JSON object.")] = False,
) -> None:
    """Start Rota: NATS, PostgreSQL, migrations and the six services, until Ctrl-C."""
    settings = get_settings()
    load_config(config or settings.config)  # fail fast, exit 2, before starting anything
    previous = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    infra = Infrastructure(settings)
    processes: list[ServiceProcess] = []
    try:
        say = err_console.print
        say("[bold]rota up[/bold]: starting infrastructure")
        endpoints = infra.start()
        asyncio.run(prepare_streams(settings, endpoints.nats_url))
        say("applying migrations")
        migrate_all(endpoints.database_url)
        env = service_env(settings, endpoints, config or settings.config)
        logs = settings.home / "logs"
        processes = [ServiceProcess(n, env, logs / f"{n}.log") for n in SERVICES]
        for process in processes:
            process.start()
        ready = _wait_ready(settings, endpoints.nats_url, processes)
        write_runtime_file(settings.runtime_file, endpoints, os.getpid())
        summary = {**infra.describe(endpoints), "home": str(settings.home.resolve()),
                   "services": {p.name: {"state": "ready" if ready[p.name] else "starting",
                                         "pid": p.process.pid if p.process else None,
                                         "log": str(p.log_path)} for p in processes}}
        if json_out:
            emit_json(summary, compact=True)  # one line, so a supervisor can read it
        else:
            _print_summary(summary)
        _supervise(processes)
    except _Stop:
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        deadline = time.monotonic() + STOP_BUDGET_S
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait_or_kill(deadline)
        infra.stop()
        settings.runtime_file.unlink(missing_ok=True)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        err_console.print("rota up: stopped")


def _wait_ready(
    settings: Settings, nats_url: str, processes: list[ServiceProcess]
) -> dict[str, bool]:
    names = [p.name for p in processes]
    deadline = time.monotonic() + READY_TIMEOUT_S
    ready = dict.fromkeys(names, False)
    while time.monotonic() < deadline and not all(ready.values()):
        for process in processes:
            if not process.alive:
                raise RuntimeError(
                    f"service {process.name} exited during start; see {process.log_path}"
                )
        pending = [n for n in names if not ready[n]]
        ready.update({k: v for k, v in asyncio.run(
            ping_all(settings, nats_url, pending)).items() if v})
        if not all(ready.values()):
            time.sleep(0.3)
    return ready


def _print_summary(summary: Mapping[str, Any]) -> None:
    err_console.print(f"NATS      {summary['nats_url']} ({summary['nats']})", highlight=False)
    err_console.print(f"Database  {summary['database_url']} ({summary['database']})",
                      highlight=False)
    table = Table("SERVICE", "STATE", "PID", "LOG", box=None, header_style="bold")
    services = summary["services"]
    assert isinstance(services, dict)
    for name, info in services.items():
        table.add_row(name, info["state"], str(info["pid"]), info["log"])
    err_console.print(table)
    err_console.print("Rota is up. Ctrl-C stops it.")


def _supervise(processes: list[ServiceProcess]) -> None:
    """Restart a service that dies, backing off so a crash loop doesn't spin."""
    next_start: dict[str, float] = {}
    while True:
        time.sleep(0.5)
        now = time.monotonic()
        for process in processes:
            if process.alive:
                continue
            due = next_start.setdefault(process.name, now + min(30.0, 2.0 ** process.restarts))
            if now >= due:
                code = process.process.returncode if process.process else None
                err_console.print(f"{process.name} exited ({code}); restarting")
                process.restarts += 1
                next_start.pop(process.name)
                process.start()
