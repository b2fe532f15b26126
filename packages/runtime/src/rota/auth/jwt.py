"""NATS nkeys and JWTs (v2), the decentralized auth the nats-server verifies by itself.

An operator signs accounts, an account signs users; a user JWT carries the user's public
nkey and its permissions, and the client proves it holds the matching seed at connect. So a
run's credentials are minted without telling the server anything (docs/DECISIONS.md, 24).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import nacl.exceptions
import nacl.signing
import nkeys

OPERATOR = nkeys.PREFIX_BYTE_OPERATOR
ACCOUNT = nkeys.PREFIX_BYTE_ACCOUNT
USER = nkeys.PREFIX_BYTE_USER

_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}


@dataclass(frozen=True)
class KeyPair:
    """An nkey: the seed is the secret, the public key is the identity."""

    seed: str = field(repr=False)
    public: str
    _signing: nacl.signing.SigningKey = field(repr=False, compare=False)

    @classmethod
    def create(cls, prefix: int) -> KeyPair:
        return cls.from_seed(nkeys.encode_seed(os.urandom(32), prefix).decode())

    @classmethod
    def from_seed(cls, seed: str) -> KeyPair:
        pair = nkeys.from_seed(seed.encode())
        _, raw = nkeys.decode_seed(seed.encode())
        return cls(seed, pair.public_key.decode(), nacl.signing.SigningKey(bytes(raw)))

    def sign(self, data: bytes) -> bytes:
        return bytes(self._signing.sign(data).signature)


@lru_cache(maxsize=4096)
def _verify_key(public: str) -> nacl.signing.VerifyKey:
    raw = base64.b32decode(public + "=" * (-len(public) % 8))
    if len(raw) != 35:
        raise ValueError("not an nkey public key")
    return nacl.signing.VerifyKey(raw[1:33])


def verify(public: str, data: bytes, signature: bytes) -> bool:
    """True when `signature` over `data` was made by the seed of `public`."""
    try:
        _verify_key(public).verify(data, signature)
    except (ValueError, nacl.exceptions.BadSignatureError, binascii.Error):
        return False
    return True


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encode(claims: dict[str, Any], signer: KeyPair) -> str:
    """A signed JWT. `jti` is the hash of the claims, as the Go library makes it."""
    body = {"iat": int(time.time()), **claims, "iss": signer.public}
    body["jti"] = base64.b32encode(
        hashlib.sha256(json.dumps(body, sort_keys=True).encode()).digest()).decode().rstrip("=")
    head = _b64(json.dumps(_HEADER, separators=(",", ":")).encode())
    payload = _b64(json.dumps(body, separators=(",", ":")).encode())
    signature = signer.sign(f"{head}.{payload}".encode())
    return f"{head}.{payload}.{_b64(signature)}"


def claims_of(token: str) -> dict[str, Any]:
    """The claims of a JWT, unchecked: for reading what a credential says of itself."""
    try:
        _, payload, _ = token.split(".")
        claims: dict[str, Any] = json.loads(_unb64(payload))
    except (ValueError, binascii.Error) as exc:
        raise ValueError(f"not a JWT: {exc}") from None
    return claims


def decode(token: str) -> dict[str, Any]:
    """The claims of a JWT whose signature is its issuer's; raises ValueError otherwise."""
    claims = claims_of(token)
    head, payload, signature = token.split(".")
    if not verify(str(claims.get("iss", "")), f"{head}.{payload}".encode(), _unb64(signature)):
        raise ValueError("the JWT's signature is not its issuer's")
    return claims


def creds(user_jwt: str, seed: str) -> str:
    """The `.creds` file nats clients read: the user JWT and the user's seed."""
    return (
        "-----BEGIN NATS USER JWT-----\n"
        f"{user_jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seed}\n"
        "------END USER NKEY SEED------\n\n"
        "*************************************************************\n"
    )


def read_creds(text: str) -> tuple[str, str]:
    """The user JWT and seed of a `.creds` file's text."""
    blocks = [line.strip() for line in text.splitlines()
              if line.strip() and not line.startswith(("-", "*", "NKEY"))]
    jwt_line = next((b for b in blocks if b.startswith("ey")), None)
    seed_line = next((b for b in blocks if b.startswith("SU")), None)
    if jwt_line is None or seed_line is None:
        raise ValueError("not a NATS .creds file: no user JWT or no user seed")
    return jwt_line, seed_line
