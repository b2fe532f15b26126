"""A CLI command against a NATS that is not there says so and exits, instead of retrying
forever (nats-py reads `max_reconnect_attempts=0` as no limit, on the first connect too)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROTA = str(Path(sys.executable).parent / "rota")


def test_a_command_says_nats_cannot_be_reached_and_exits_1(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "ROTA_NATS_URL": f"nats://127.0.0.1:{port}",
           "ROTA_HOME": str(tmp_path / ".rota")}
    env.pop("ROTA_NATS_CREDS", None)
    result = subprocess.run([ROTA, "queues"], env=env, capture_output=True, text=True,
                            timeout=60, cwd=tmp_path)
    assert result.returncode == 1
    assert f"cannot reach NATS at nats://127.0.0.1:{port}" in " ".join(result.stderr.split())
