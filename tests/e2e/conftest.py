"""One `rota up --json` per test module that asks for it, in a `ROTA_HOME` of its own."""

from __future__ import annotations

import json
import os
import select
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.up import ROTA, up_log


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rota-home")


@pytest.fixture(scope="module")
def env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROTA_NATS_URL", "ROTA_DATABASE_URL", "ROTA_CONFIG")}
    env["ROTA_HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def rota_up(home: Path, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    log = (home / "up.log").open("wb")
    process = subprocess.Popen([ROTA, "up", "--json"], env=env, stdout=subprocess.PIPE,
                               stderr=log, stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    # `--json` prints one object once every service answers its ping.
    ready, _, _ = select.select([process.stdout], [], [], 120)
    if not ready:
        process.kill()
        pytest.fail(f"rota up not ready in 120 s: {up_log(home)}")
    line = process.stdout.readline()
    if not line:
        pytest.fail(f"rota up exited: {up_log(home)}")
    summary = json.loads(line)
    assert summary["nats"] == "embedded" and summary["database"] == "embedded"
    assert {s["state"] for s in summary["services"].values()} == {"ready"}
    yield process
    if process.poll() is None:
        process.kill()
    log.close()
