"""The identities of the AsyncAPI document: each one's security scheme with its permissions,
and which identities may use each channel, all computed from the permissions the code issues
(rota.auth.permissions), so that the document cannot say other than the server enforces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rota.auth.permissions import (
    CONSOLE,
    RUN_NAME,
    SERVICES,
    Permissions,
    _team_permissions,
    console_permissions,
    run_template,
    service_permissions,
)
from rota.contracts.compat import subject_covers

TEAM = "<team>"
"""The team token in the team identity's rendered permissions."""

CREDS = ("A NATS user JWT and its nkey seed, in a `.creds` file (NATS decentralized auth: "
         "the client signs the server's nonce with the seed; the server checks the JWT's "
         "signature chain to Rota's operator and enforces the permissions it carries).")


@dataclass(frozen=True)
class Identity:
    name: str
    permissions: Permissions | None
    """None: the admin, which may do anything."""
    description: str
    placeholders: dict[str, str]
    """What each `{parameter}` of a channel address is for this identity."""

    def may_publish(self, address: str) -> bool:
        if self.permissions is None:
            return True
        subject = self.concrete(address)
        return any(subject_covers(allowed, subject) for allowed in self.permissions.publish)

    def may_subscribe(self, address: str) -> bool:
        if self.permissions is None:
            return True
        subject = self.concrete(address)
        return (any(subject_covers(allowed, subject) for allowed in self.permissions.subscribe)
                and not any(subject_covers(denied, subject)
                            for denied in self.permissions.subscribe_deny))

    def concrete(self, address: str) -> str:
        for parameter, value in self.placeholders.items():
            address = address.replace(f"{{{parameter}}}", value)
        return address


def identities() -> list[Identity]:
    """The team, a run, each service, the console and the admin."""
    found = [
        Identity("team", _team_permissions(TEAM),
                 "A team's credentials (`rota creds issue --team`): its own commands, requests and "
                 "feed. The JWT's `tags` carry `team:<team>` and `inbox:_INBOX_team_<team>`; "
                 "connect with that inbox prefix.",
                 {"team": TEAM, "service": "<service>", "run_id": "<run_id>"}),
        Identity("run", run_template(),
                 "A run's own credentials (`ROTA_NATS_CREDS`), minted by the executor and "
                 "signed by the run-scoped key, so the server binds `{{name()}}` to the run "
                 "id: its notices and its checkpoint reports only. Connect with inbox prefix "
                 "`_INBOX_run_<run_id>`.",
                 {"run_id": RUN_NAME, "team": "<team>", "service": "<service>"}),
    ]
    found += [Identity(f"service-{name}", service_permissions(name),
                       f"The {name} service (`creds/{name}.creds` under ROTA_NATS_AUTH_DIR).",
                       {"service": name, "team": TEAM, "run_id": "<run_id>"})
              for name in SERVICES]
    found += [
        Identity(CONSOLE, console_permissions(),
                 "The web console: the read queries, a team's cancel, the teams' feeds.",
                 {"team": TEAM, "service": "<service>", "run_id": "<run_id>"}),
        Identity("admin", None, "The admin (`creds/admin.creds`, `rota up`): anything.",
                 {}),
    ]
    return found


def _rendered(p: Permissions | None) -> dict[str, Any]:
    if p is None:
        return {"publish": [">"], "subscribe": [">"], "allow_responses": True,
                "inbox_prefix": "_INBOX"}
    doc: dict[str, Any] = {"publish": list(p.publish), "subscribe": list(p.subscribe),
                           "allow_responses": p.responses, "inbox_prefix": p.inbox_prefix}
    if p.subscribe_deny:
        doc["subscribe_deny"] = list(p.subscribe_deny)
    if p.tags:
        doc["jwt_tags"] = [*p.tags, f"inbox:{p.inbox_prefix}"]
    return doc


def security_schemes() -> dict[str, dict[str, Any]]:
    """One AsyncAPI security scheme per identity, its permissions in `x-rota-permissions`.
    AsyncAPI has no NATS type: a `.creds` user proves its key by signing the server's nonce,
    which is `asymmetricEncryption` in the document's terms."""
    return {identity.name: {"type": "asymmetricEncryption",
                            "description": f"{identity.description} {CREDS}",
                            "x-rota-permissions": _rendered(identity.permissions)}
            for identity in identities()}


def allowed(address: str, action: str) -> list[str]:
    """The identities that may use a channel for an operation of Rota's `action`: publish to
    what Rota receives, subscribe to what Rota sends."""
    if action == "receive":
        return [i.name for i in identities() if i.may_publish(address)]
    return [i.name for i in identities() if i.may_subscribe(address)]
