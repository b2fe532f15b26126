"""Rota's identities on disk: one operator, one account for Rota, a system account, a signing
key scoped to run identities, and a `.creds` file per service and for the admin.

`rota up` (and `rota auth init` for servers of your own) make them once under
`ROTA_HOME/auth` and reuse them; the seeds are the secrets, readable by their owner only.
The nats-server needs none of the seeds: `server.conf` holds only signed JWTs.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rota.auth.jwt import ACCOUNT, OPERATOR, USER, KeyPair, claims_of, creds, encode, read_creds
from rota.auth.permissions import (
    CONSOLE,
    SERVICES,
    Permissions,
    console_permissions,
    run_template,
    service_permissions,
    team_permissions,
)
from rota.clock import Clock, SystemClock
from rota.settings import Settings

_UNLIMITED = {"subs": -1, "data": -1, "payload": -1}
_ACCOUNT_LIMITS = {**_UNLIMITED, "imports": -1, "exports": -1, "wildcards": True, "conn": -1,
                   "leaf": -1}
_JETSTREAM_LIMITS = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
ADMIN = "admin"

ROTATION_GRACE_S = 300.0
"""After `rota auth init --rotate`, how long the roster still believes what the old keys
signed (by the server's time of storing it): the services' restart onto their new keys is
expected within it, and what they published before it stays believed in every replay."""


@dataclass(frozen=True)
class TeamLimits:
    """What the server allows a team user per connection; -1 is no limit."""

    payload: int
    """Bytes of one message (headers included): a team's commands and requests are
    envelopes the services refuse above `max_message_bytes` anyway."""
    subs: int = 100
    """Subscriptions at once: a team needs a few (its replies, its feed, `rota watch`)."""
    data: int = -1
    """Bytes in all (the JWT's `data`); unlimited: `payload` bounds each message, and a
    team sends few."""

    @classmethod
    def for_messages(cls, max_message_bytes: int) -> TeamLimits:
        return cls(payload=max_message_bytes + HEADERS_ALLOWANCE)


HEADERS_ALLOWANCE = 4096
"""Room for a message's headers (trace context, the dedup id) above its body's cap."""

DEFAULT_TEAM_LIMITS = TeamLimits.for_messages(Settings.model_fields["max_message_bytes"].default)


def _nats_permissions(p: Permissions) -> dict[str, Any]:
    subscribe: dict[str, list[str]] = {"allow": list(p.subscribe)}
    if p.subscribe_deny:
        subscribe["deny"] = list(p.subscribe_deny)
    claims: dict[str, Any] = {"pub": {"allow": list(p.publish)}, "sub": subscribe}
    if p.responses:
        claims["resp"] = {"max": 1, "ttl": 0}
    return claims


def _write_secret(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    tmp.replace(path)


@dataclass(frozen=True)
class AuthDir:
    root: Path
    clock: Clock = field(default_factory=SystemClock, compare=False)

    @property
    def server_conf(self) -> Path:
        return self.root / "server.conf"

    def creds_path(self, name: str) -> Path:
        return self.root / "creds" / f"{name}.creds"

    @property
    def run_signing_key(self) -> Path:
        return self.root / "run-signing.nk"

    @property
    def account_public_file(self) -> Path:
        return self.root / "account.pub"

    def _key(self, name: str, prefix: int) -> KeyPair:
        path = self.root / f"{name}.nk"
        if path.exists():
            return KeyPair.from_seed(path.read_text().strip())
        pair = KeyPair.create(prefix)
        _write_secret(path, pair.seed + "\n")
        return pair

    @property
    def account(self) -> KeyPair:
        return self._key("account", ACCOUNT)

    @property
    def revocations(self) -> Path:
        return self.root / "revocations.json"

    def _revoked(self) -> dict[str, int]:
        """User public key → the time (Unix seconds) before which its JWTs are revoked."""
        if not self.revocations.exists():
            return {}
        revoked: dict[str, int] = json.loads(self.revocations.read_text())
        return revoked

    def ensure(self) -> AuthDir:
        """Make what is missing; keys already there are kept, so identities stay valid."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o700)
        self._write_server_conf()
        # Kept when present: a service's key signs its events, and replays check old ones.
        for service in SERVICES:
            if not self.creds_path(service).exists():
                self.issue(service, service_permissions(service), self.creds_path(service))
        if not self.creds_path(ADMIN).exists():
            self.issue(ADMIN, None, self.creds_path(ADMIN))
        # The console signs no events, so it is in no roster.
        if not self.creds_path(CONSOLE).exists():
            self.issue(CONSOLE, console_permissions(), self.creds_path(CONSOLE))
        self._write_roster()
        return self

    def _write_server_conf(self) -> None:
        """The operator's and the accounts' JWTs; Rota's account names the revoked user keys
        (`nats.revocations`), so the server refuses their JWTs from its next (re)start."""
        operator, system = self._key("operator", OPERATOR), self._key("system", ACCOUNT)
        account, runs = self.account, self._key("run-signing", ACCOUNT)
        operator_jwt = encode({"sub": operator.public, "name": "rota", "nats": {
            "type": "operator", "version": 2, "system_account": system.public}}, operator)
        system_jwt = encode({"sub": system.public, "name": "SYS", "nats": {
            "limits": _ACCOUNT_LIMITS, "type": "account", "version": 2}}, operator)
        template = run_template()
        nats: dict[str, Any] = {
            "limits": {**_ACCOUNT_LIMITS, **_JETSTREAM_LIMITS},
            "signing_keys": [{
                "kind": "user_scope", "key": runs.public, "role": "run",
                "description": "run identities: their own notices and acknowledgement only",
                "template": {**_nats_permissions(template), **_UNLIMITED}}],
            "type": "account", "version": 2}
        if revoked := self._revoked():
            nats["revocations"] = revoked
        account_jwt = encode({"sub": account.public, "name": "ROTA", "nats": nats}, operator)
        self.server_conf.write_text(
            "# Generated by Rota (rota.auth.keys): operator mode, every identity a signed JWT.\n"
            f"operator: {operator_jwt}\n"
            f"system_account: {system.public}\n"
            "resolver: MEMORY\n"
            "resolver_preload: {\n"
            f"  {system.public}: {system_jwt}\n"
            f"  {account.public}: {account_jwt}\n"
            "}\n")
        self.account_public_file.write_text(account.public + "\n")

    @property
    def roster(self) -> Path:
        return self.root / "roster.json"

    def _write_roster(self, retired: dict[str, float] | None = None) -> None:
        """Every service key ever issued here stays in the roster (events it signed are
        still replayed); `rota auth init --rotate` adds the new ones beside them and names
        the old ones under `retired`, each with its cut-over. The
        account's and the admin's public keys are there too: the console believes a login
        is the admin's by its key, never by the name a JWT gives itself."""
        roster: dict[str, Any] = (json.loads(self.roster.read_text()) if self.roster.exists()
                                  else {"signed_since": self._now(), "keys": {}})
        for service in SERVICES:
            _, seed = read_creds(self.creds_path(service).read_text())
            roster["keys"][KeyPair.from_seed(seed).public] = service
        if retired:
            roster["retired"] = retired
        roster["account"] = self.account.public
        admin_jwt, _ = read_creds(self.creds_path(ADMIN).read_text())
        roster["admins"] = sorted({*roster.get("admins", ()), claims_of(admin_jwt)["sub"]})
        self.roster.write_text(json.dumps(roster, indent=2, sort_keys=True) + "\n")

    def _now(self) -> float:
        return self.clock.now().timestamp()

    def _public_key(self, name: str) -> str:
        user_jwt, _ = read_creds(self.creds_path(name).read_text())
        return str(claims_of(user_jwt)["sub"])

    def rotate_services(self, *, grace_s: float = ROTATION_GRACE_S) -> None:
        """New keys for every service and the console, and the old ones revoked twice over:
        in the account JWT (`server.conf`), so the server refuses them once it restarts, and
        in the roster, which believes what they signed only if the server stored it before
        the cut-over (now + `grace_s`), so replays of their older events still check."""
        now = self._now()
        revoked, retired = self._revoked(), self._retired()
        for name, permissions in (*((s, service_permissions(s)) for s in SERVICES),
                                  (CONSOLE, console_permissions())):
            old = self._public_key(name)
            revoked[old] = int(now)
            if name != CONSOLE:
                retired[old] = now + grace_s
            self.issue(name, permissions, self.creds_path(name))
        self.revocations.write_text(json.dumps(revoked, indent=2, sort_keys=True) + "\n")
        self._write_server_conf()
        self._write_roster(retired)

    def _retired(self) -> dict[str, float]:
        if not self.roster.exists():
            return {}
        retired: dict[str, float] = json.loads(self.roster.read_text()).get("retired", {})
        return retired

    def issue(self, name: str, permissions: Permissions | None, out: Path,
              *, expires_in_s: float | None = None, limits: TeamLimits | None = None) -> Path:
        """A `.creds` file for a user of Rota's account; no permissions means everything, no
        limits none (the services' and the admin's)."""
        user = KeyPair.create(USER)
        nats: dict[str, Any] = {"type": "user", "version": 2, **_UNLIMITED}
        if limits is not None:
            nats.update(subs=limits.subs, data=limits.data, payload=limits.payload)
        claims: dict[str, Any] = {"sub": user.public, "name": name}
        if permissions is not None:
            nats.update(_nats_permissions(permissions))
            nats["tags"] = [*permissions.tags, f"inbox:{permissions.inbox_prefix}"]
        if expires_in_s is not None:
            claims["exp"] = int(self._now() + expires_in_s)
        claims["nats"] = nats
        _write_secret(out, creds(encode(claims, self.account), user.seed))
        return out

    def issue_team(self, team: str, user: str | None, out: Path,
                   *, expires_in_s: float | None = None,
                   limits: TeamLimits | None = None) -> Path:
        """A team's credentials, with the server's limits on what each connection may send
        and hold (`TeamLimits`; the defaults for the default message cap if not given)."""
        name = f"{team}/{user}" if user else team
        return self.issue(name, team_permissions(team), out, expires_in_s=expires_in_s,
                          limits=limits or DEFAULT_TEAM_LIMITS)


def run_creds(run_id: str, signing_seed: str, account_public: str,
              *, expires_in_s: float | None = None) -> str:
    """A run's own `.creds`: signed with the run-scoped key, so the server grants it the run
    template bound to this run id and nothing else, whatever the JWT would claim."""
    user = KeyPair.create(USER)
    claims: dict[str, Any] = {"sub": user.public, "name": run_id, "nats": {
        "type": "user", "version": 2, "issuer_account": account_public}}
    if expires_in_s is not None:
        claims["exp"] = int(time.time() + expires_in_s)
    return creds(encode(claims, KeyPair.from_seed(signing_seed)), user.seed)


def with_identity(settings: Settings, service: str) -> Settings:
    """`settings` with what `ROTA_NATS_AUTH_DIR` gives `service`, where not set already."""
    if settings.nats_auth_dir is None:
        return settings
    auth = AuthDir(settings.nats_auth_dir)
    update: dict[str, Any] = {
        "nats_creds": settings.nats_creds or auth.creds_path(service),
        "nats_roster": settings.nats_roster or auth.roster,
    }
    if service == "executor":
        update["nats_run_signing_key"] = settings.nats_run_signing_key or auth.run_signing_key
        update["nats_account"] = (settings.nats_account
                                  or auth.account_public_file.read_text().strip())
    return settings.model_copy(update=update)
