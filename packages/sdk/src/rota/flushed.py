"""Waiting until the server has read everything a connection wrote.

nats-py (2.16) writes a flush's PING straight to the socket, while a new SUB waits in the
client's pending buffer for the flusher task: one `flush()` can come back before the server
has seen the SUB (or a PUB), and a message another connection publishes at once finds no
interest (a request gets "no responders", a publish is dropped). By the time the first PONG
returns, the flusher has written the buffer, so a second PING follows it on the wire and its
PONG proves the server has read it.
"""

from __future__ import annotations

from nats.aio.client import Client


async def flushed(nc: Client) -> None:
    """Return once the server has read every command `nc` sent before this call: its
    subscriptions are registered and its publishes routed."""
    await nc.flush()
    await nc.flush()
