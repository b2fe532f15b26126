"""Defence in depth: every service signs what it publishes, and every consumer checks that an
event or a service command comes from an identity that owns its type.

NATS permissions already refuse a forgery; this catches one that a misconfigured server let
through. The signature is ed25519 over the exact body, by the nkey of the service's NATS
identity (its `.creds` seed), in the headers `Rota-Signer` (the public key) and
`Rota-Signature`. The roster (`ROTA_HOME/auth/roster.json`) names the service of each public
key; only public keys are in it.

Not signed, by design: a team's commands (the team comes from the subject, which only that
team may publish on) and a run's `ReportCheckpoint` request (proven by its run token, which
the executor checks before it publishes the signed `RunCheckpointed`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rota.auth.jwt import KeyPair, read_creds, verify
from rota.auth.permissions import COMMAND_OWNERS, EVENT_OWNERS
from rota.contracts.subjects import EVENT_SUBJECTS

log = logging.getLogger("rota.auth.senders")

SIGNER_HEADER = "Rota-Signer"
SIGNATURE_HEADER = "Rota-Signature"

_TYPE_OF_SUBJECT = {subject: name for name, subject in EVENT_SUBJECTS.items()}


MADE_REMEMBERED = 16_384
"""Signatures a signer remembers making (about 3 MB): several seconds of a busy scheduler's
output, and its own events come back within a second or two."""


class Signer:
    """This process's signing identity: the nkey of its NATS credentials.

    It remembers the last signatures it made, with a digest of each body, so that a consumer
    in the same process believes its own messages coming back (the scheduler reads every
    event, its own decisions included) without verifying them again: an ed25519 check is
    about 90 µs, the most expensive step of reading an event."""

    def __init__(self, key: KeyPair) -> None:
        self._key = key
        self._made: OrderedDict[str, bytes] = OrderedDict()

    @classmethod
    def from_creds(cls, path: Path) -> Signer:
        _, seed = read_creds(path.read_text())
        return cls(KeyPair.from_seed(seed))

    @property
    def public(self) -> str:
        return self._key.public

    def headers(self, body: bytes) -> dict[str, str]:
        signature = base64.b64encode(self._key.sign(body)).decode()
        self._made[signature] = _digest(body)
        if len(self._made) > MADE_REMEMBERED:
            self._made.popitem(last=False)  # the oldest
        return {SIGNER_HEADER: self._key.public, SIGNATURE_HEADER: signature}

    def made(self, signer: str, signature: str, body: bytes) -> bool:
        """Whether this signer made `signature` over exactly `body` (as far as it remembers)."""
        made = self._made.get(signature)
        return signer == self._key.public and made is not None and made == _digest(body)


def _digest(body: bytes) -> bytes:
    return hashlib.blake2b(body, digest_size=32).digest()


_signer: Signer | None = None


def install_signer(signer: Signer | None) -> None:
    """Set once at a service's start: every envelope it publishes from then on is signed."""
    global _signer
    _signer = signer


def signature_headers(body: bytes) -> dict[str, str]:
    return _signer.headers(body) if _signer is not None else {}


@dataclass(frozen=True)
class Roster:
    """Public key → the service it belongs to, and since when services sign: a message the
    server stored before then (a stream from before auth was set up) is believed unsigned."""

    services: Mapping[str, str]
    signed_since: float = 0.0
    account: str | None = None
    """The public key of Rota's account, which issues every team's and the admin's JWT."""
    admins: frozenset[str] = frozenset()
    """The admin identities' public keys (user nkeys)."""
    retired: Mapping[str, float] = field(default_factory=dict)
    """Keys replaced by `rota auth init --rotate`, each with its cut-over: what such a key
    signed is believed only if the server stored it before then."""

    @classmethod
    def load(cls, path: Path) -> Roster:
        doc = json.loads(path.read_text())
        retired = {key: float(at) for key, at in doc.get("retired", {}).items()}
        return cls(doc["keys"], float(doc.get("signed_since", 0.0)), doc.get("account"),
                   frozenset(doc.get("admins", ())), retired)


@dataclass(frozen=True)
class SenderCheck:
    roster: Roster

    def refusal(self, subject: str, headers: Mapping[str, str] | None, body: bytes,
                *, stored_at: float | None = None) -> str | None:
        """Why this message may not be believed, or None. Subjects it has no rule for (team
        commands, control notices) pass: their protection is the subject permission.
        `stored_at` is the server's timestamp of a stream message (not the sender's)."""
        owners = _owners(subject)
        if owners is None:
            return None
        headers = headers or {}
        signer, signature = headers.get(SIGNER_HEADER), headers.get(SIGNATURE_HEADER)
        if signer is None or signature is None:
            if stored_at is not None and stored_at < self.roster.signed_since:
                return None
            return f"{subject}: unsigned, and only {', '.join(sorted(owners))} may publish it"
        service = self.roster.services.get(signer)
        if service is None:
            return f"{subject}: signed by an unknown key"
        if (cut_over := self.roster.retired.get(signer)) is not None and (
                stored_at is None or stored_at >= cut_over):
            return f"{subject}: signed by a key of {service} retired by rotation"
        if service not in owners:
            return f"{subject}: published by {service}; only {', '.join(sorted(owners))} may"
        if _signer is None or not _signer.made(signer, signature, body):
            try:
                raw = base64.b64decode(signature, validate=True)
            except (binascii.Error, ValueError):
                return f"{subject}: the signature is not base64"
            if not verify(signer, body, raw):
                return f"{subject}: the signature does not match the body"
        if _TYPE_OF_SUBJECT.get(subject) not in (None, _peek_type(body)):
            return f"{subject}: the body's type is not this subject's"
        return None


def _owners(subject: str) -> frozenset[str] | None:
    if (event := _TYPE_OF_SUBJECT.get(subject)) is not None:
        return EVENT_OWNERS[event]
    return COMMAND_OWNERS.get(subject)


def _peek_type(body: bytes) -> str | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    kind = doc.get("type") if isinstance(doc, dict) else None
    return kind if isinstance(kind, str) else None
