"""`flushed` puts a PING on the wire after every SUB made before it, where nats-py's own
`flush()` can send its PING first (and so return before the server holds the SUB)."""

from __future__ import annotations

from collections.abc import Iterable

import nats
from rota.endpoints import Endpoints
from rota.flushed import flushed


def _record_writes(nc: nats.NATS) -> list[bytes]:
    """The protocol lines `nc` writes from now on, in the order they reach the socket."""
    written: list[bytes] = []
    transport = nc._transport
    assert transport is not None
    write, writelines = transport.write, transport.writelines

    def record_write(payload: bytes) -> None:
        written.append(bytes(payload))
        write(payload)

    def record_writelines(payloads: Iterable[bytes]) -> None:
        chunks = [bytes(p) for p in payloads]
        written.extend(chunks)
        writelines(chunks)

    transport.write = record_write  # type: ignore[method-assign]
    transport.writelines = record_writelines  # type: ignore[method-assign]
    return written


async def test_the_last_ping_follows_the_sub(endpoints: Endpoints) -> None:
    nc = await nats.connect(endpoints.nats_url)
    try:
        written = _record_writes(nc)
        await nc.subscribe("rota.test.subscribed")
        await flushed(nc)
        subs = [i for i, line in enumerate(written) if line.startswith(b"SUB ")]
        pings = [i for i, line in enumerate(written) if line.startswith(b"PING")]
        assert subs and pings
        assert pings[-1] > subs[-1], written
    finally:
        await nc.close()
