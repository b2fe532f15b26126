"""The compose NATS config as shipped (`deploy/nats/nats.conf`, including the generated
`auth/server.conf` beside it) starts a real nats-server that admits Rota's identities only."""

from __future__ import annotations

from pathlib import Path

import nats
import pytest
from rota.auth.keys import ADMIN, AuthDir
from rota.embedded import EmbeddedNats

SHIPPED = Path(__file__).parents[3] / "deploy" / "nats" / "nats.conf"


async def test_the_shipped_nats_conf_runs_with_generated_auth(tmp_path: Path) -> None:
    AuthDir(tmp_path / "auth").ensure()
    conf = tmp_path / "nats.conf"
    # The same file beside its generated include; the flags put the port and the store here
    # (nats-server refuses a store_dir given twice).
    conf.write_text(SHIPPED.read_text().replace("http_port: 8222", "")
                    .replace("store_dir: /data/jetstream", ""))
    server = EmbeddedNats(tmp_path, config=conf)
    server.start()
    try:
        url = server.url
        admin = await nats.connect(url, user_credentials=str(tmp_path / "auth" / "creds"
                                                             / f"{ADMIN}.creds"))
        assert (await admin.jetstream().account_info()).streams == 0  # JetStream is on
        await admin.close()
        with pytest.raises(Exception, match=r"(?i)authorization"):
            await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
    finally:
        server.stop()
