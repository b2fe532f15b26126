"""Replicas of one service that split the work by a key: a job, a run or a flavor.

NATS 2.9 has no stream partitions (subject transforms came in 2.10), and a job's id is in no
subject, so a partitioned consumer is one durable per replica over the whole subject: replica
`i` of `n` handles the messages whose key hashes to `i` and acks the others unread. Each job
then has one reader, in stream order, so its events are applied in order; the cost is that
every replica receives every message (`n` deliveries each). A message with no key goes to
replica 0. With one replica nothing changes: the durable keeps its old name and sees all.

A durable that is new when the number of replicas changes starts at the lowest ack floor of
its family (the old durables), not at the stream's start and not at its end: every message
above that floor may be handled again, which the consumers' idempotency makes harmless, and
none is skipped.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from rota.bus.trace_fill import envelope_field, job_id_of
from rota.settings import Settings

log = logging.getLogger("rota.bus.partition")

PartitionKey = Callable[[Msg], str | None]
"""A message's partition key; None: no key (replica 0 handles it)."""


@dataclass(frozen=True, slots=True)
class Partition:
    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"replica {self.index} of {self.count}: the index must be in "
                             f"0 .. {self.count - 1}")

    @classmethod
    def from_settings(cls, settings: Settings) -> Partition:
        return cls(settings.replica, settings.replicas)

    @property
    def single(self) -> bool:
        return self.count == 1

    def owner(self, key: str | None) -> int:
        """The replica that handles `key`: a hash every process computes alike (crc32, not
        Python's salted `hash`)."""
        return 0 if key is None else zlib.crc32(key.encode()) % self.count

    def owns(self, key: str | None) -> bool:
        return self.single or self.owner(key) == self.index

    def durable(self, base: str) -> str:
        return base if self.single else f"{base}-p{self.index}of{self.count}"

    @property
    def label(self) -> str:
        return f"{self.index + 1}/{self.count}"


def by_job(msg: Msg) -> str | None:
    return job_id_of(msg.data)


def by_run(msg: Msg) -> str | None:
    """The run's id: the envelope's, or the last token of `rota.ctl.run.<run_id>`."""
    run_id = envelope_field(msg.data, "run_id")
    if run_id is None and msg.subject.startswith("rota.ctl.run."):
        return msg.subject.rsplit(".", 1)[1]
    return run_id


async def start_of_new_durable(js: JetStreamContext, stream: str, family: str,
                               durable: str) -> int | None:
    """Where `durable` of `family` starts if it does not exist yet: the stream sequence after
    the lowest ack floor among the family's durables (`family` itself and `family-*`). None:
    it exists already (it resumes where it is), or the family is new (it reads from the
    start, as any new durable does)."""
    try:
        await js.consumer_info(stream, durable)
        return None
    except NotFoundError:
        pass
    floors = [info.ack_floor.stream_seq or 0 for info in await js.consumers_info(stream)
              if info.name == family or (info.name or "").startswith(f"{family}-")
              if info.ack_floor is not None]
    if not floors:
        return None
    start = min(floors) + 1
    log.info("%s: new, starts at stream sequence %d (the lowest ack floor of %s*)", durable,
             start, family)
    return start


def starting_at(config: ConsumerConfig, start: int | None) -> ConsumerConfig:
    if start is not None:
        config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = start
    return config
