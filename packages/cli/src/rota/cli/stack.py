"""The pieces `rota up` and `rota migrate` share: endpoints, migrations, service processes."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # NATS, the servers and the settings load where a stack starts, not with `rota`
    from rota.auth.keys import AuthDir
    from rota.embedded import EmbeddedNats, EmbeddedNatsCluster, EmbeddedPostgres
    from rota.endpoints import Endpoints
    from rota.settings import Settings

SERVICES = ("submission", "ledger", "scheduler", "preemption", "notifier", "executor")
REPLICABLE = ("submission", "ledger", "notifier", "executor")
"""The services `rota up --replicas` may run several of: their consumers split the work by
job, run or flavor (README, Scale-out). The scheduler and the coordinator are singletons."""
MAX_REPLICAS = 8


def parse_replicas(text: str | None) -> dict[str, int]:
    """`submission=2,executor=2` → {"submission": 2, "executor": 2}; a clear error naming
    the part that is wrong: an unknown service, a singleton, a count out of range."""
    counts: dict[str, int] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, count = part.partition("=")
        name = name.strip()
        if not sep:
            raise ValueError(f"{part!r}: expected <service>=<count>, e.g. submission=2")
        if name not in SERVICES:
            raise ValueError(f"{name!r} is not a service; replicable: {', '.join(REPLICABLE)}")
        if name not in REPLICABLE:
            raise ValueError(f"{name} runs as one instance (a singleton); replicable: "
                             f"{', '.join(REPLICABLE)}")
        if name in counts:
            raise ValueError(f"{name} is given twice")
        try:
            value = int(count)
        except ValueError:
            raise ValueError(f"{name}={count!r}: the count must be a whole number") from None
        if not 1 <= value <= MAX_REPLICAS:
            raise ValueError(f"{name}={value}: the count must be 1 to {MAX_REPLICAS}")
        counts[name] = value
    return counts


def replica_names(service: str, count: int) -> list[str]:
    """The processes of a service: its name alone, or `<service>-<index>` for each replica."""
    return [service] if count == 1 else [f"{service}-{i}" for i in range(count)]


CONSOLE = "console"
"""The web console: a process `rota up` supervises like a service, with no tables and no
events of its own, so no migrations and no ping."""
CONSOLE_PORT = 8089
CONSOLE_READY_S = 30.0


def migrations_dir(service: str) -> Path:
    spec = importlib.util.find_spec(f"rota_{service}")
    if spec is None or spec.origin is None:
        raise RuntimeError(f"the rota_{service} package is not installed (uv sync)")
    return Path(spec.origin).parent / "migrations"


def migrate_all(database_url: str, services: tuple[str, ...] = SERVICES) -> list[str]:
    from rota.db import migrate  # Alembic is slow to import; only `up` and `migrate` need it

    for service in services:
        migrate.upgrade(database_url, service, migrations_dir(service))
    return list(services)


async def prepare_streams(settings: Settings, endpoints: Endpoints) -> list[str]:
    """The streams and the lease buckets, made or updated as the admin: the services'
    identities may not (`rota.auth.permissions.jetstream_subjects`). Their names."""
    import nats

    from rota.bus.broker import StreamLimits, check_replicas, ensure_streams
    from rota.contracts.subjects import STREAM_SUBJECTS
    from rota.lease import ensure_lease_buckets

    nc = await nats.connect(endpoints.nats_url, connect_timeout=5,
                            **admin_options(settings, endpoints))
    try:
        js = nc.jetstream()
        await wait_for_jetstream(js)
        await ensure_streams(js, settings.stream_replicas, StreamLimits.from_settings(settings))
        await check_replicas(js, allow_single=settings.allow_single_replica_on_cluster)
        buckets = await ensure_lease_buckets(js, settings)
    finally:
        await nc.close()
    return [*STREAM_SUBJECTS, *buckets]


async def wait_for_jetstream(js: Any, timeout_s: float = 60.0) -> None:
    """Until JetStream answers: a new cluster's servers elect their meta leader first (about
    5 s), and until then every JetStream request fails."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await js.account_info()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


@dataclass
class Infrastructure:
    """Embedded servers where no URL is configured; given servers are used as they are."""

    settings: Settings
    nats: EmbeddedNats | None = None
    cluster: EmbeddedNatsCluster | None = None
    postgres: EmbeddedPostgres | None = None
    auth: AuthDir | None = None

    def start(self) -> Endpoints:
        from rota.auth.keys import ADMIN, AuthDir
        from rota.embedded import EmbeddedNats, EmbeddedNatsCluster, EmbeddedPostgres, home_path
        from rota.endpoints import Endpoints

        home = home_path(self.settings.home)
        nats_url = self.settings.nats_url
        if not nats_url:
            if self.settings.auth:
                self.auth = AuthDir(home / "auth").ensure()
            conf = self.auth.server_conf if self.auth else None
            if self.settings.nats_cluster > 1:
                self.cluster = EmbeddedNatsCluster(home, self.settings.nats_cluster, conf)
                nats_url = self.cluster.start()
            else:
                self.nats = EmbeddedNats(home, config=conf)
                nats_url = self.nats.start()
        database_url = self.settings.database_url
        if not database_url:
            self.postgres = EmbeddedPostgres(home)
            database_url = self.postgres.start()
        admin = str(self.auth.creds_path(ADMIN).resolve()) if self.auth else None
        return Endpoints(nats_url, database_url, admin)

    def identity_env(self, service: str) -> dict[str, str]:
        """What a service connects as: its own identity when the embedded NATS has auth on;
        the executor also gets the key it mints run credentials with."""
        if self.auth is None:
            return {}
        env = {"ROTA_NATS_CREDS": str(self.auth.creds_path(service).resolve()),
               "ROTA_NATS_ROSTER": str(self.auth.roster.resolve())}
        if service == "executor":
            env["ROTA_NATS_RUN_SIGNING_KEY"] = str(self.auth.run_signing_key.resolve())
            env["ROTA_NATS_ACCOUNT"] = self.auth.account_public_file.read_text().strip()
        return env

    def stop(self, deadline: float) -> dict[str, float]:
        """Stop the embedded servers side by side by `deadline` (monotonic); their stop times."""
        stops: dict[str, Callable[[float], None]] = {}
        if self.nats is not None:
            stops["nats"] = self.nats.stop
        if self.cluster is not None:
            stops["nats"] = self.cluster.stop
        if self.postgres is not None:
            stops["postgres"] = self.postgres.stop
        began = time.monotonic()

        def timed(stop: Callable[[float], None]) -> float:
            stop(deadline)
            return time.monotonic() - began

        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = {name: pool.submit(timed, stop) for name, stop in stops.items()}
            return {name: future.result() for name, future in futures.items()}

    def restart_dead_servers(self, next_start: dict[str, float]) -> list[str]:
        """Restart an embedded server that died, on the same port (or socket) and data, so
        the URLs the services hold stay valid and they reconnect by themselves; backing off
        like a service's restart, so a server that keeps dying doesn't spin. What happened,
        one line each."""
        now = time.monotonic()
        said: list[str] = []
        for name, node in self.nats_servers().items():
            if (code := node.exit_code()) is not None:
                said += _restart_when_due(
                    name, f"embedded nats-server{'' if name == 'nats' else f' {node.name}'} "
                    f"exited (code {code})", "port",
                    node.restarts, node.restart, next_start, now)
        if self.postgres is not None and self.postgres.dead():
            # Not our child (pg_ctl detaches it), so its exit code is nobody's to read.
            said += _restart_when_due(
                "postgres", f"embedded PostgreSQL exited (postmaster pid {self.postgres.pid})",
                "socket", self.postgres.restarts, self.postgres.restart, next_start, now)
        return said

    def nats_servers(self) -> dict[str, EmbeddedNats]:
        """The embedded nats-servers by name: one, or the cluster's."""
        if self.cluster is not None:
            return {f"nats-{i}": node for i, node in enumerate(self.cluster.nodes)}
        return {"nats": self.nats} if self.nats is not None else {}

    def describe(self, endpoints: Endpoints) -> dict[str, str]:
        from rota.db.engine import redact

        return {
            "nats_url": endpoints.nats_url,
            "nats": (f"embedded cluster of {len(self.cluster.nodes)}, streams at R"
                     f"{self.settings.stream_replicas}" if self.cluster
                     else "embedded" if self.nats else "external"),
            "nats_auth": "on" if self.auth else ("off" if self.nats or self.cluster
                                                 else "as configured"),
            "database_url": redact(endpoints.database_url),
            "database": "embedded" if self.postgres else "external",
        }


def backoff_s(restarts: int) -> float:
    """How long a dead process waits for its next start: 1, 2, 4 ... up to 30 s."""
    return min(30.0, 2.0 ** restarts)


def _restart_when_due(name: str, exited: str, address: str, restarts: int,
                      restart: Callable[[], object], next_start: dict[str, float],
                      now: float) -> list[str]:
    """Restart a dead server once its backoff is over; the line that says what happened."""
    from rota.embedded import EmbeddedError

    if now < next_start.setdefault(name, now + backoff_s(restarts)):
        return []
    next_start.pop(name)
    try:
        restart()
    except EmbeddedError as exc:
        return [f"{exited}; restart failed ({exc}); trying again"]
    return [f"{exited}; restarted on the same {address} and data"]


@dataclass
class ServiceProcess:
    name: str
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    _log: IO[bytes] | None = field(default=None, repr=False)
    service: str = ""
    """The service it runs (`rota_<service>`): its name unless it is one of several replicas."""
    replica: int | None = None

    @property
    def module(self) -> str:
        return f"rota_{self.service or self.name}"

    @property
    def ping_subject(self) -> str:
        from rota.contracts.subjects import ping, replica_ping

        service = self.service or self.name
        return ping(service) if self.replica is None else replica_ping(service, self.replica)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.module],
            env=self.env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
        )

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def terminate(self) -> None:
        if self.alive:
            assert self.process is not None
            self.process.terminate()

    def wait_or_kill(self, deadline: float) -> bool:
        """Wait for the exit until `deadline` (monotonic), then kill; True if it was killed."""
        if self.process is None:
            return False
        killed = False
        try:
            self.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            killed = True
        if self._log is not None:
            self._log.close()
        return killed


def service_env(settings: Settings, endpoints: Endpoints, config: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["ROTA_NATS_URL"] = endpoints.nats_url
    env["ROTA_DATABASE_URL"] = endpoints.database_url
    env["ROTA_HOME"] = str(settings.home.resolve())
    env["ROTA_STREAM_REPLICAS"] = str(settings.stream_replicas)
    if config is not None:
        env["ROTA_CONFIG"] = str(config.resolve())
    return env


def admin_options(settings: Settings, endpoints: Endpoints) -> dict[str, Any]:
    """`rota up` itself connects as the admin of the NATS it started, before the runtime file
    that tells other commands so is written."""
    from rota.bus.options import connect_options

    if endpoints.nats_creds is not None:
        return {**connect_options(settings), "user_credentials": endpoints.nats_creds,
                "inbox_prefix": "_INBOX"}
    return connect_options(settings)


async def ping_all(settings: Settings, endpoints: Endpoints,
                   subjects: dict[str, str]) -> dict[str, bool]:
    """Which processes answer their ping subject (process name → subject)."""
    import nats

    nc = await nats.connect(endpoints.nats_url, connect_timeout=3,
                            **admin_options(settings, endpoints))
    try:
        async def one(subject: str) -> bool:
            try:
                await nc.request(subject, b"", timeout=1.0)
                return True
            except Exception:
                return False

        results = await asyncio.gather(*(one(subject) for subject in subjects.values()))
    finally:
        await nc.close()
    return dict(zip(subjects, results, strict=True))


def metrics_ports(settings: Settings, names: tuple[str, ...] = SERVICES) -> dict[str, int]:
    """A distinct `/metrics` port per service.

    Consecutive from `ROTA_METRICS_PORT` when it is set (stable, for a scrape config of your
    own); otherwise free ports, so two stacks on one machine (tests) never collide. The
    sockets stay open until all are picked, so the ports are distinct.
    """
    if settings.metrics_port:
        return {name: settings.metrics_port + i for i, name in enumerate(names)}
    sockets = []
    try:
        for _ in names:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((settings.metrics_host, 0))
            sockets.append(sock)
        return {name: int(s.getsockname()[1]) for name, s in zip(names, sockets, strict=True)}
    finally:
        for sock in sockets:
            sock.close()


def metrics_url(settings: Settings, port: int) -> str:
    host = settings.metrics_host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # bound on every interface; this one answers on this machine
    return f"http://{host}:{port}/metrics"


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def console_port(env: dict[str, str]) -> int:
    """`ROTA_CONSOLE_PORT` when set; else 8089, or any free port when another stack (or
    anything) holds 8089, so two stacks on one machine never collide."""
    if env.get("ROTA_CONSOLE_PORT"):
        return int(env["ROTA_CONSOLE_PORT"])
    host = env.get("ROTA_CONSOLE_BIND") or "127.0.0.1"
    if _port_free(host, CONSOLE_PORT):
        return CONSOLE_PORT
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def console_url(env: dict[str, str], port: int) -> str:
    host = env.get("ROTA_CONSOLE_BIND") or "127.0.0.1"
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://{host}:{port}"


def start_console(env: dict[str, str], log_path: Path) -> tuple[ServiceProcess, dict[str, Any]]:
    """Start the console and wait until it answers `/healthz`: its process and summary."""
    import urllib.error
    import urllib.request

    port = console_port(env)
    process = ServiceProcess(CONSOLE, {**env, "ROTA_CONSOLE_PORT": str(port)}, log_path)
    process.start()
    url = console_url(env, port)
    deadline = time.monotonic() + CONSOLE_READY_S
    state = "starting"
    while time.monotonic() < deadline and process.alive:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1) as answer:
                if answer.status == 200:
                    state = "ready"
                    break
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    if not process.alive:
        state = "exited"
    return process, {"url": url, "state": state,
                     "pid": process.process.pid if process.process else None,
                     "log": str(log_path)}
