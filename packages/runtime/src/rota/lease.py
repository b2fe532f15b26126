"""One active holder: a lease in a NATS KV bucket whose entries expire after a TTL. The
scheduler holds one (a single active scheduler); ledger replicas hold one per flavor.

The leader creates the key and renews it (compare-and-set on its revision) every third of
the TTL. A standby keeps trying to create it; once the leader stops renewing, the bucket's
TTL removes the key and the standby's create succeeds. A leader whose renewal fails has lost
the lease and must stop acting at once.

Renewal runs on the event loop, so nothing CPU-bound may hold the loop for a TTL: the policy
runs in a worker thread (`Scheduler.cycle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from nats.js import JetStreamContext
from nats.js.errors import BucketNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from rota.auth.permissions import LEASE_BUCKETS
from rota.settings import Settings

log = logging.getLogger("rota.lease")

BUCKET = LEASE_BUCKETS["scheduler"]
KEY = "leader"
"""The scheduler's lease: one key; other holders name their own bucket and keys."""


class Lease:
    def __init__(self, js: JetStreamContext, holder: str, ttl_s: float, *, bucket: str = BUCKET,
                 key: str = KEY) -> None:
        self._js = js
        self.holder = holder
        self.key = key
        self.ttl_s = ttl_s
        self.bucket = bucket
        self._kv: KeyValue | None = None
        self._revision = 0
        self.renewals = 0
        """Renewals that succeeded, for tests and logs."""

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await ensure_bucket(self._js, self.bucket, self.ttl_s)
        return self._kv

    async def try_acquire(self) -> bool:
        kv = await self._bucket()
        try:
            self._revision = await kv.create(self.key, self.holder.encode())
        except KeyWrongLastSequenceError:
            return False
        log.info("lease %s/%s acquired by %s", self.bucket, self.key, self.holder)
        return True

    async def acquire(self) -> None:
        """Wait, as a standby, until this process holds the lease."""
        while True:
            if await self.try_acquire():
                return
            await asyncio.sleep(self.ttl_s / 3)

    async def renew(self) -> bool:
        kv = await self._bucket()
        try:
            self._revision = await kv.update(self.key, self.holder.encode(), last=self._revision)
        except KeyWrongLastSequenceError:
            log.error("lease %s/%s lost by %s", self.bucket, self.key, self.holder)
            return False
        self.renewals += 1
        return True

    async def keep(self, lost: asyncio.Event) -> None:
        """Renew until renewal fails, then set `lost`."""
        while True:
            await asyncio.sleep(self.ttl_s / 3)
            try:
                if not await self.renew():
                    lost.set()
                    return
            except Exception as exc:  # NATS away: keep trying until the TTL decides
                log.warning("lease %s renewal failed: %s", self.key, exc)

    async def release(self) -> None:
        if self._kv is not None and self._revision:
            with contextlib.suppress(Exception):
                await self._kv.delete(self.key, last=self._revision)


async def ensure_bucket(js: JetStreamContext, bucket: str, ttl_s: float,
                        replicas: int = 1) -> KeyValue:
    """The lease bucket, made with `ttl_s` if it is missing. A bucket is a stream, which
    only the admin may make under Rota's identities: `rota up` and `rota migrate` make the
    services' buckets first (`ensure_lease_buckets`), and a service only finds them."""
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        return await js.create_key_value(bucket=bucket, ttl=ttl_s, history=1,
                                         replicas=replicas)


async def ensure_lease_buckets(js: JetStreamContext, settings: Settings) -> list[str]:
    """Every service's lease bucket, each with its lease's TTL from `settings`."""
    ttls = {"scheduler": settings.scheduler_lease_ttl_s, "ledger": settings.ledger_lease_ttl_s}
    for service, bucket in LEASE_BUCKETS.items():
        await ensure_bucket(js, bucket, ttls[service], settings.stream_replicas)
    return sorted(LEASE_BUCKETS.values())
