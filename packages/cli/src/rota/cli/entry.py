"""The `rota` console script: it loads only the command it runs.

`rota.cli.main.app` is the whole command line, with every command's module imported and
every command's options built; Typer builds them all each time an app starts (about 100 ms),
and the modules of `up`, `bench`, `cluster`, `creds`, `demo` and `replay` import NATS, the
embedded servers, Kubernetes and the replay. So `main` looks at the first argument: a command
or group of the tables below is imported alone and run as the only one of an app with `app`'s
settings (its help, parsing, output and exit codes are `app`'s: tests/unit/test_cli_startup.py
compares them); anything else (`rota`, `rota --help`, `config`, `migrate`, `contracts`, a
typo that click suggests a name for) runs `app` itself. `app` registers the same tables, in
this order, so the two cannot drift apart.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import threading
from typing import Any

import typer

APP_SETTINGS: dict[str, Any] = {
    "name": "rota",
    "help": "Rota: a checkpoint-aware, explainable queue for GPU training jobs.",
    "no_args_is_help": True,
    "pretty_exceptions_enable": False,
    "add_completion": False,
}

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module, function), in the order `rota --help` lists them
    "demo": ("rota.demo.runner", "demo"),
    "up": ("rota.cli.up", "up"),
    "submit": ("rota.cli.jobs", "submit"),
    "jobs": ("rota.cli.jobs", "jobs"),
    "job": ("rota.cli.jobs", "job"),
    "cancel": ("rota.cli.jobs", "cancel"),
    "queues": ("rota.cli.jobs", "queues"),
    "why": ("rota.cli.jobs", "why"),
    "trace": ("rota.cli.jobs", "trace"),
    "watch": ("rota.cli.watch", "watch"),
    "notifications": ("rota.cli.notifications", "notifications"),
    "deadletter": ("rota.cli.deadletter", "deadletter"),
    "preemptions": ("rota.cli.operations", "preemptions"),
    "allocations": ("rota.cli.operations", "allocations"),
    "replay": ("rota.cli.replay", "replay_command"),
    "convert-trace": ("rota.cli.replay", "convert_trace_command"),
}
GROUPS: dict[str, tuple[str, str]] = {
    # name: (module, Typer app)
    "bench": ("rota.cli.bench", "bench_app"),
    "creds": ("rota.cli.creds", "creds_app"),
    "auth": ("rota.cli.creds", "auth_app"),
    "cluster": ("rota.cli.cluster", "cluster_app"),
}


def load(module: str, attribute: str) -> Any:
    return getattr(importlib.import_module(module), attribute)


def add(app: typer.Typer, name: str) -> None:
    """Register the command or group `name` of the tables on `app`."""
    if name in COMMANDS:
        app.command(name)(load(*COMMANDS[name]))
    else:
        app.add_typer(load(*GROUPS[name]), name=name)


def command_app(name: str) -> typer.Typer | None:
    """An app of `app`'s settings with only the command or group `name`; None when `name` is
    not in the tables."""
    if name not in COMMANDS and name not in GROUPS:
        return None
    one = typer.Typer(**APP_SETTINGS)
    add(one, name)
    # An app of one command and no callback runs that command as the program itself (with
    # no name to give); a callback keeps it a group of one, as `app` is a group.
    one.callback()(_no_options)
    return one


def _no_options() -> None:
    pass  # `rota` itself takes no option but --help (and no docstring: the help is `app`'s)


def skip_websocket_transport() -> None:
    """Import nats-py without aiohttp, the largest import of a quick command: nats-py wants it
    only for NATS over websockets (ws://, wss://), which Rota never serves. aiohttp itself stays
    importable for what needs it (kubernetes-asyncio: `rota cluster import`). Only the `rota`
    process does this, for the commands of the tables, and not when ROTA_NATS_URL names a
    websocket server."""
    if os.environ.get("ROTA_NATS_URL", "").startswith("ws") or "aiohttp" in sys.modules:
        return
    sys.modules["aiohttp"] = None  # type: ignore[assignment]  # `import aiohttp` fails ...
    try:
        import nats.aio.transport  # noqa: F401  # ... in nats-py's transport, which then has none
    finally:
        del sys.modules["aiohttp"]


COLLECTOR_BACK_AFTER_S = 1.0


def main() -> None:
    """The `rota` console script."""
    # Starting builds objects that live as long as the command (modules, the contracts' models,
    # Typer's options): the cycle collector would only walk them again and again, about a
    # tenth of a quick command's time. A command still running after a second (`up`, `watch`,
    # `demo`, a bench) gets it back.
    gc.disable()
    collector_back = threading.Timer(COLLECTOR_BACK_AFTER_S, gc.enable)
    collector_back.daemon = True  # the command's end does not wait for it
    collector_back.start()
    one = command_app(sys.argv[1] if len(sys.argv) > 1 else "")
    if one is not None:
        skip_websocket_transport()
    # Anything else is the whole command line's, whose module registers these tables.
    app: typer.Typer = load("rota.cli.main", "app") if one is None else one
    app()
