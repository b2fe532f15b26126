"""Several ledger replicas: the grants of each flavor have one owner, by a lease per flavor.

With `ROTA_REPLICAS` > 1, each ledger replica competes for leases in the NATS KV bucket
`rota_ledger_lease` (the scheduler's `rota.lease.Lease`, one key per flavor). Only the holder
of `flavor.<name>` runs that flavor's proposal consumer, the durable
`ledger-proposals-f-<name>`, which keeps the proposals of that flavor and acks the others
unread; so a replica without the lease never grants on the flavor. The lease `events` carries
the run-end and preemption consumers (releases, holds: one writer, as with one ledger) and
the proposals that name no configured flavor (rejected `UNKNOWN_FLAVOR`, as before).

A replica that dies stops renewing; its keys expire after the bucket's TTL and another
replica's create succeeds. It binds the same durable, so it continues from the dead owner's
ack floor: a proposal that was decided but not acked is decided again, and the ledger's
idempotency guard (inside the flavor's lock) makes that a no-op. A replica whose renewal fails
stops that flavor's consumer at once. A transaction already in flight may still commit after
the lease moved: the flavor's advisory lock serialises it with the new owner's, and the
unique index on active GPUs refuses a double booking whatever happens; the lease makes
ownership the rule, the database keeps it the guarantee.

At start, each key is first tried by its preferred replica (key `i` by replica `i mod n`);
the others try it only after one TTL, so a fresh start spreads the flavors, and a dead
replica's keys are taken over by whoever asks first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from nats.aio.msg import Msg
from rota.auth.permissions import LEASE_BUCKETS
from rota.bus.batch import BatchHandler, MessageHandler, PullConsumer, batch_consumer, message_consumer
from rota.bus.trace_fill import envelope_field
from rota.contracts.subjects import EVENT_SUBJECTS, STREAM_EVT
from rota.ids import new_id
from rota.lease import Lease
from rota.service import RotaService, stop_tasks

from rota_ledger.ledger import PREEMPTIONS, PROPOSALS, RUNS

log = logging.getLogger("rota.ledger.owners")

BUCKET = LEASE_BUCKETS["ledger"]
EVENTS = "events"
"""The lease of the run-end and preemption consumers, and of proposals of no known flavor."""


def flavor_key(flavor: str) -> str:
    return f"flavor.{flavor}"


def flavor_durable(flavor: str) -> str:
    """A durable name may not hold a dot; a flavor name may."""
    return f"{PROPOSALS}-f-{flavor.replace('.', '_')}"


def flavor_of(msg: Msg) -> str | None:
    return envelope_field(msg.data, "flavor")


@dataclass(frozen=True)
class Handlers:
    proposals: BatchHandler
    run_event: MessageHandler
    preemption_event: MessageHandler


def consumers_by_key(flavors: Iterable[str], handlers: Handlers
                     ) -> dict[str, Callable[[], list[PullConsumer]]]:
    """What the holder of each lease runs."""
    known = sorted(set(flavors))
    durables = {flavor_durable(f) for f in known}
    if len(durables) != len(known):
        raise ValueError("two flavors differ only by '.' and '_': their proposal durables "
                         "would be one (cluster.flavors)")
    proposals = EVENT_SUBJECTS["AllocationProposed"]

    def one_flavor(flavor: str) -> Callable[[], list[PullConsumer]]:
        return lambda: [batch_consumer(
            proposals, STREAM_EVT, flavor_durable(flavor), 128, handlers.proposals,
            keep=lambda msg: flavor_of(msg) == flavor, family=PROPOSALS)]

    def events() -> list[PullConsumer]:
        return [
            message_consumer("rota.evt.run.>", STREAM_EVT, RUNS, 128, handlers.run_event,
                             max_ack_pending=1000),
            message_consumer("rota.evt.preemption.>", STREAM_EVT, PREEMPTIONS, 32,
                             handlers.preemption_event, max_ack_pending=1000),
            batch_consumer(proposals, STREAM_EVT, f"{PROPOSALS}-f-_other", 128,
                           handlers.proposals, keep=lambda msg: flavor_of(msg) not in known,
                           family=PROPOSALS),
        ]

    return {EVENTS: events, **{flavor_key(f): one_flavor(f) for f in known}}


def preferred(keys: Iterable[str], index: int, count: int) -> frozenset[str]:
    """The keys replica `index` of `count` asks for first: every `count`-th, in name order."""
    return frozenset(k for i, k in enumerate(sorted(keys)) if i % count == index)


@dataclass
class Owners:
    """The leases this replica holds and the consumers each runs."""

    service: RotaService
    consumers: dict[str, Callable[[], list[PullConsumer]]]
    ttl_s: float
    holder: str = field(default_factory=lambda: (
        f"{socket.gethostname()}-{os.getpid()}-{new_id()[-8:]}"))
    held: dict[str, tuple[Lease, list[asyncio.Task[None]]]] = field(default_factory=dict)

    @property
    def owned(self) -> list[str]:
        return sorted(self.held)

    async def run(self) -> None:
        partition = self.service.partition
        mine = preferred(self.consumers, partition.index, partition.count)
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            while True:
                patient = loop.time() - began >= self.ttl_s
                for key in sorted(self.consumers):
                    if key in self.held:
                        await self._renew(key)
                    elif key in mine or patient:
                        await self._try(key)
                await asyncio.sleep(self.ttl_s / 3)
        finally:
            await self.release_all()

    async def _try(self, key: str) -> None:
        lease = Lease(self.service.broker.connection.jetstream(), self.holder, self.ttl_s,
                      bucket=BUCKET, key=key)
        try:
            if not await lease.try_acquire():
                return
        except Exception as exc:  # NATS away: ask again next round
            log.warning("lease %s: %s", key, exc)
            return
        tasks = [self.service.start_consumer(c) for c in self.consumers[key]()]
        self.held[key] = (lease, tasks)
        log.info("ledger replica %s owns %s", partition_label(self.service), key)

    async def _renew(self, key: str) -> None:
        lease, tasks = self.held[key]
        try:
            if await lease.renew():
                return
        except Exception as exc:  # NATS away: keep trying until the TTL decides
            log.warning("lease %s renewal failed: %s", key, exc)
            return
        # Lost (another replica holds it now): stop granting on it at once.
        del self.held[key]
        await stop_tasks(tasks)
        log.error("ledger replica %s lost %s; its consumers stopped",
                  partition_label(self.service), key)

    async def release_all(self) -> None:
        held, self.held = self.held, {}
        await stop_tasks([t for _, tasks in held.values() for t in tasks])
        for lease, _ in held.values():
            with contextlib.suppress(Exception):
                await lease.release()


def partition_label(service: RotaService) -> str:
    return service.partition.label
