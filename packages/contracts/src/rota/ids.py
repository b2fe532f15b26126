"""Identifiers. Envelope and job ids are UUIDv7, so they sort by creation time."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime

import uuid6


def new_id() -> str:
    return str(uuid6.uuid7())


SHORT_ID_LENGTH = 12


def short_id(job_id: str) -> str:
    """The last 12 hex digits of a job id: 48 of its random bits, so unique in practice
    (the leading digits are its timestamp, shared by every job of the same moment).
    `rota.api.job.get` and the CLI accept it wherever they take a job id."""
    return job_id[-SHORT_ID_LENGTH:]


def derived_id(seed: str, at: datetime) -> str:
    """A UUIDv7 that is a pure function of `seed` and `at`.

    Used where a redelivered input must yield the very same outgoing message id, so that
    JetStream's `Nats-Msg-Id` de-duplication drops the second publish.
    """
    millis = int(at.timestamp() * 1000) & ((1 << 48) - 1)
    digest = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:10], "big")
    rand_a = digest >> 68 & 0xFFF
    rand_b = digest & ((1 << 62) - 1)
    value = millis << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    return str(uuid.UUID(int=value))


_STABLE_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def stable_id(seed: str) -> str:
    """A UUIDv7-shaped id that depends only on `seed`: for commands that must be sent once
    per run however often a restarted service decides to send them."""
    return derived_id(seed, _STABLE_EPOCH)
