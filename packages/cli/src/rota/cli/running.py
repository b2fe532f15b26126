"""A whole Rota on this machine: infrastructure, migrations, six supervised service processes.

`rota up` and `rota demo` both run one `Stack`; it stops in reverse order within a budget.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rota.cli.stack import (
    CONSOLE,
    SERVICES,
    Infrastructure,
    ServiceProcess,
    backoff_s,
    metrics_ports,
    metrics_url,
    migrate_all,
    ping_all,
    prepare_streams,
    replica_names,
    service_env,
    start_console,
)

if TYPE_CHECKING:
    from rota.endpoints import Endpoints
    from rota.settings import Settings

# `rota up` promises a stop within 10 s; the services get most of it to drain, the servers
# the rest, and whatever is still alive at its share's end is killed.
STOP_BUDGET_S = 8.0
SERVICES_SHARE_S = 4.5
READY_TIMEOUT_S = 60.0


class Executor(StrEnum):
    sim = "sim"
    local = "local"
    kubernetes = "kubernetes"


def console_login(admin_creds: Path | str | None) -> str:
    """How to log in to the console: it asks for a .creds file, pasted or chosen."""
    team = "a team's .creds from `rota creds issue --team <team>`"
    if admin_creds is None:
        return f"paste or choose {team}"
    return f"paste or choose {admin_creds} (the admin: every team), or {team}"


@dataclass
class Stack:
    settings: Settings
    config: Path | None
    executor: Executor = Executor.sim
    extra_env: dict[str, str] = field(default_factory=dict)
    say: Any = print
    console: bool = True
    """Start the web console too, once the services are ready."""
    replicas: dict[str, int] = field(default_factory=dict)
    """Services run as several processes (`rota up --replicas`); the rest run one each."""
    infra: Infrastructure | None = None
    endpoints: Endpoints | None = None
    processes: list[ServiceProcess] = field(default_factory=list)

    def start(self) -> dict[str, Any]:
        self.infra = Infrastructure(self.settings)
        self.say("starting infrastructure")
        self.endpoints = self.infra.start()
        asyncio.run(prepare_streams(self.settings, self.endpoints))
        self.say("applying migrations")
        migrate_all(self.endpoints.database_url)
        env = service_env(self.settings, self.endpoints, self.config)
        env["ROTA_EXECUTOR"] = self.executor.value
        env.update(self.extra_env)
        logs = self.settings.home / "logs"
        # Each service its own /metrics port, kept across restarts so a URL stays valid.
        self.processes = self._service_processes(env, logs)
        ports = metrics_ports(self.settings, tuple(p.name for p in self.processes))
        for process in self.processes:
            process.env["ROTA_METRICS_PORT"] = str(ports[process.name])
            process.start()
        ready = self._wait_ready()
        services = {p.name: {"state": "ready" if ready[p.name] else "starting",
                             "pid": p.process.pid if p.process else None,
                             "log": str(p.log_path),
                             "metrics": metrics_url(self.settings, ports[p.name]),
                             **({} if p.replica is None else {
                                 "service": p.service, "replica": p.replica,
                                 "replicas": self.replicas[p.service]})}
                    for p in self.processes}
        console = None
        if self.console:
            # Its own identity (rota.auth.permissions.console_permissions): every read, plain
            # and team-scoped, and a team's cancel; it sends a team viewer's questions only to
            # that team's own subjects.
            process, console = start_console({**env, **self.infra.identity_env(CONSOLE)},
                                             logs / f"{CONSOLE}.log")
            console["login"] = console_login(self.endpoints.nats_creds)
            self.processes.append(process)
        from rota.endpoints import write_runtime_file

        write_runtime_file(self.settings.runtime_file, self.endpoints, os.getpid())
        return {**self.infra.describe(self.endpoints), "home": str(self.settings.home.resolve()),
                "executor": self.executor.value, "services": services, "console": console,
                **({"replicas": {k: v for k, v in self.replicas.items() if v > 1}}
                   if any(v > 1 for v in self.replicas.values()) else {})}

    def _service_processes(self, env: dict[str, str], logs: Path) -> list[ServiceProcess]:
        """A process per service, or per replica: `<service>-<i>` with `ROTA_REPLICA=i` of
        `ROTA_REPLICAS`, each with the service's identity."""
        assert self.infra is not None
        processes = []
        for service in SERVICES:
            count = self.replicas.get(service, 1)
            for i, name in enumerate(replica_names(service, count)):
                own = {} if count == 1 else {"ROTA_REPLICAS": str(count), "ROTA_REPLICA": str(i)}
                processes.append(ServiceProcess(
                    name, {**env, **self.infra.identity_env(service), **own}, logs / f"{name}.log",
                    service=service, replica=None if count == 1 else i))
        return processes

    def _wait_ready(self) -> dict[str, bool]:
        assert self.endpoints is not None
        names = [p.name for p in self.processes]
        subjects = {p.name: p.ping_subject for p in self.processes}
        deadline = time.monotonic() + READY_TIMEOUT_S
        ready = dict.fromkeys(names, False)
        while time.monotonic() < deadline and not all(ready.values()):
            for process in self.processes:
                if not process.alive:
                    raise RuntimeError(
                        f"service {process.name} exited during start; see {process.log_path}"
                    )
            pending = [n for n in names if not ready[n]]
            answered = asyncio.run(ping_all(self.settings, self.endpoints,
                                            {n: subjects[n] for n in pending}))
            ready.update({k: v for k, v in answered.items() if v})
            if not all(ready.values()):
                time.sleep(0.3)
        return ready

    def restart_dead(self, next_start: dict[str, float]) -> list[str]:
        """Restart services that died, backing off so a crash loop doesn't spin."""
        restarted = []
        now = time.monotonic()
        for process in self.processes:
            if process.alive:
                continue
            due = next_start.setdefault(process.name, now + backoff_s(process.restarts))
            if now >= due:
                process.restarts += 1
                next_start.pop(process.name)
                process.start()
                restarted.append(process.name)
        return restarted

    def restart_dead_servers(self, next_start: dict[str, float]) -> list[str]:
        """Restart an embedded nats-server or PostgreSQL that died, with backoff; what
        happened, a line each (see `Infrastructure.restart_dead_servers`)."""
        return self.infra.restart_dead_servers(next_start) if self.infra is not None else []

    def stop(self) -> None:
        began = time.monotonic()
        deadline = began + STOP_BUDGET_S
        for process in self.processes:
            process.terminate()
        services_deadline = min(deadline, began + SERVICES_SHARE_S)
        killed = [p.name for p in self.processes if p.wait_or_kill(services_deadline)]
        services_s = time.monotonic() - began
        servers = self.infra.stop(deadline) if self.infra is not None else {}
        self.settings.runtime_file.unlink(missing_ok=True)
        timings = ", ".join([f"services {services_s:.1f} s",
                             *(f"{name} {seconds:.1f} s" for name, seconds in servers.items())])
        self.say(f"stopped in {time.monotonic() - began:.1f} s ({timings})"
                 + (f"; killed {', '.join(killed)}" if killed else ""))
