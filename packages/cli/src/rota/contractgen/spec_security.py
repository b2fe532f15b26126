"""What FastStream's AsyncAPI document lacks and Rota's contract has: who may use each channel
(a security scheme per identity, with its permissions, on the server and each operation),
the channel parameters, the correlation (`data.command_id`, never a header), a team's
liveness check, and a run's direct get of its last notice.
"""

from __future__ import annotations

import re
from typing import Any

from rota.contracts import subjects as s
from rota.contracts.envelope import COMMAND_TYPES, CONTROL_TYPES, QUERY_TYPES
from rota.contracts.versions import PROTOCOL_VERSION

ANSWERS = frozenset({"ApiReply", "JobSubmitted", "JobResubmitted", "JobRejected",
                     "JobCancelled"})
"""The types that answer a command or a request, naming it in `data.command_id`."""

ASKED = frozenset({*COMMAND_TYPES, *QUERY_TYPES, *CONTROL_TYPES}
                  - {"ApiReply", "PreemptionNotice"})

PARAMETERS = {
    "team": "A team's name, as in rota.yaml: one subject token (no '.'). A team identity may "
            "use only its own.",
    "run_id": "A run's id (ROTA_RUN_ID). A run identity may use only its own.",
    "service": "A service's name: submission, ledger, scheduler, preemption, notifier, "
               "executor.",
}

DIRECT_GET = f"$JS.API.DIRECT.GET.{s.STREAM_CTL}.rota.ctl.run.{{run_id}}"
TEAM_PING = f"{s.API_PING}.{{team}}"


def _ref(name: str) -> str:
    return name.replace("{", "%7B").replace("}", "%7D")


def _message_type(message: dict[str, Any]) -> str | None:
    ref = str(message.get("payload", {}).get("$ref", ""))
    found = re.search(r"Envelope%5B(\w+)%5D$", ref)
    return found.group(1) if found else None


def _correlate(document: dict[str, Any]) -> None:
    """FastStream names a `correlation_id` header that Rota never sends: a request or command
    is named by its envelope `id` (also its `Nats-Msg-Id`), and each answer carries that in
    `data.command_id`."""
    for message in document["components"]["messages"].values():
        message.pop("correlationId", None)
        kind = _message_type(message)
        if kind in ASKED:
            message["correlationId"] = {
                "location": "$message.payload#/id",
                "description": "The envelope's id, also sent as the Nats-Msg-Id header; "
                "each answer names it in data.command_id."}
        elif kind in ANSWERS:
            message["correlationId"] = {
                "location": "$message.payload#/data/command_id",
                "description": "The id of the command or request this answers (its envelope "
                "id, else its Nats-Msg-Id when that is a UUID); null when neither was "
                "readable."}


def _team_ping(document: dict[str, Any], reply: dict[str, Any]) -> None:
    document["channels"][TEAM_PING] = {
        "address": TEAM_PING,
        "description": "A team's liveness check, answered by the submission service (all a "
        f"team talks to) with an ApiReply: data.result = {{ok: true, service: submission, "
        f"team, protocol_version: {PROTOCOL_VERSION}}}. The request's body is not read.",
        "messages": {"Ping": {"payload": {"description": "Anything; empty is fine."}}},
    }
    document["operations"][TEAM_PING] = {
        "action": "receive", "channel": {"$ref": f"#/channels/{_ref(TEAM_PING)}"},
        "messages": [{"$ref": f"#/channels/{_ref(TEAM_PING)}/messages/Ping"}],
        "reply": reply,
    }


def _direct_get(document: dict[str, Any]) -> None:
    notice = next(c for c in document["channels"].values()
                  if c.get("address") == "rota.ctl.run.{run_id}")
    notice_message = next(iter(notice["messages"].values()))
    found_headers = {
        "type": "object",
        "description": "The stored message's own headers (Nats-Msg-Id, traceparent, the "
        "publisher's signature) and the stream's.",
        "required": ["Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp"],
        "properties": {"Nats-Stream": {"const": s.STREAM_CTL},
                       "Nats-Subject": {"type": "string"},
                       "Nats-Sequence": {"type": "string", "pattern": "^[0-9]+$"},
                       "Nats-Time-Stamp": {"type": "string"}}}
    document["channels"]["reply:DirectGet"] = {
        "address": None,
        "description": "The answer to a direct get, on the requester's inbox.",
        "messages": {
            "Notice": {"headers": found_headers, "payload": notice_message,
                       "description": "The last PreemptionNotice of the run, unchanged: an "
                       "action of withdrawn cancels the notice it names."},
            "NoNotice": {"headers": {
                "type": "object", "required": ["Status"],
                "properties": {"Status": {"const": "404"},
                               "Description": {"const": "Message Not Found"}}},
                "payload": {"type": "string", "maxLength": 0},
                "description": "No notice was ever sent to the run: an empty body with NATS "
                "status 404 (nats-py raises NotFoundError)."}},
    }
    document["channels"][DIRECT_GET] = {
        "address": DIRECT_GET,
        "description": "JetStream direct get of the last message on the run's control "
        "subject in ROTA_CTL (nats-py: js.get_last_msg('ROTA_CTL', subject, direct=True)), "
        "so that a notice sent before the run subscribed still reaches it. A run may not "
        "create a consumer.",
        "messages": {"DirectGet": {"payload": {"type": "string", "maxLength": 0,
                                               "description": "An empty body."}}},
    }
    document["operations"][DIRECT_GET] = {
        "action": "receive", "channel": {"$ref": f"#/channels/{_ref(DIRECT_GET)}"},
        "messages": [{"$ref": f"#/channels/{_ref(DIRECT_GET)}/messages/DirectGet"}],
        "reply": {"address": {"location": "$message.header#/reply",
                              "description": "The NATS reply subject of the request."},
                  "channel": {"$ref": "#/channels/reply:DirectGet"},
                  "messages": [{"$ref": "#/channels/reply:DirectGet/messages/Notice"},
                               {"$ref": "#/channels/reply:DirectGet/messages/NoNotice"}]},
    }


def _parameters(document: dict[str, Any]) -> None:
    for channel in document["channels"].values():
        names = re.findall(r"\{(\w+)\}", channel.get("address") or "")
        if names:
            channel["parameters"] = {n: {"description": PARAMETERS[n]} for n in names}


def _secure(document: dict[str, Any]) -> None:
    from rota.auth.identities import allowed, security_schemes

    schemes = security_schemes()
    document["components"]["securitySchemes"] = schemes
    for server in document["servers"].values():
        server["security"] = [{"$ref": f"#/components/securitySchemes/{n}"} for n in schemes]
        server["description"] = ("Rota's NATS, with operator-mode auth: every client connects "
                                 "with the .creds of one of the identities below.")
    for operation in document["operations"].values():
        channel_id = operation["channel"]["$ref"].removeprefix("#/channels/")
        channel = document["channels"][channel_id.replace("%7B", "{").replace("%7D", "}")]
        operation["security"] = [{"$ref": f"#/components/securitySchemes/{name}"}
                                 for name in allowed(channel["address"], operation["action"])]


def complete(document: dict[str, Any]) -> dict[str, Any]:
    reply = document["operations"][f"{s.API_SUBMIT}.{{team}}:SubmitJob"]["reply"]
    _team_ping(document, reply)
    _direct_get(document)
    _parameters(document)
    _correlate(document)
    _secure(document)
    return document
