"""The compose NATS config as shipped (`deploy/nats/nats.conf`, including the generated
`auth/server.conf` beside it) starts a real nats-server that admits Rota's identities only."""

from __future__ import annotations

import subprocess
from pathlib import Path

import nats
import pytest
from rota.auth.keys import ADMIN, AuthDir
from rota.embedded import _wait_for_port, free_port, nats_server_binary

SHIPPED = Path(__file__).parents[3] / "deploy" / "nats" / "nats.conf"


async def test_the_shipped_nats_conf_runs_with_generated_auth(tmp_path: Path) -> None:
    AuthDir(tmp_path / "auth").ensure()
    port = free_port()
    conf = tmp_path / "nats.conf"
    # The same file, with this machine's paths and ports in place of the container's.
    conf.write_text(SHIPPED.read_text()
                    .replace("/data/jetstream", str(tmp_path / "js"))
                    .replace("port: 4222", f"port: {port}").replace("http_port: 8222", ""))
    server = subprocess.Popen([str(nats_server_binary()), "-c", str(conf), "-a", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_for_port(port, 15, server)
        url = f"nats://127.0.0.1:{port}"
        admin = await nats.connect(url, user_credentials=str(tmp_path / "auth" / "creds"
                                                             / f"{ADMIN}.creds"))
        assert (await admin.jetstream().account_info()).streams == 0  # JetStream is on
        await admin.close()
        with pytest.raises(Exception, match=r"(?i)authorization"):
            await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    finally:
        server.terminate()
        server.wait(10)
