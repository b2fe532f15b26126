"""The admin's node commands on the submission service, against real NATS and PostgreSQL:
`rota.api.node.drain` and `.undrain` record their events through the outbox, refuse a node
that rota.yaml does not have, and have no team-scoped twin. Who may publish on them at all is
NATS's to enforce (`test_node_commands_are_no_teams_or_consoles`)."""

from __future__ import annotations

from datetime import datetime

from nats.aio.client import Client
from rota.auth.permissions import console_permissions, team_permissions
from rota.contracts import messages as m
from rota.contracts import subjects as s

from tests.integration.harness import ServiceProcess, api, events, eventually, stream_last_seq


async def test_drain_and_undrain_record_their_events_and_refuse_an_unknown_node(
        nc: Client, submission: ServiceProcess) -> None:
    since = await stream_last_seq(nc)
    node = "h100-1"
    reply = await api(nc, s.API_NODE_DRAIN, m.DrainNode(node=node, deadline_s=600, reason="nic"))
    assert reply.ok, reply.error
    assert reply.result["node"] == node and reply.result["reason"] == "nic"

    async def drained() -> list[dict[str, object]]:
        return [e for e in await events(nc, s.EVENT_SUBJECTS["NodeDrainRequested"], since_seq=since)
                if e["data"]["node"] == node]

    [event] = await eventually(drained)
    assert event["source"] == "submission" and event["data"]["reason"] == "nic"
    assert event["data"]["requested_by"] == "admin"
    deadline = datetime.fromisoformat(event["data"]["deadline"])
    occurred = datetime.fromisoformat(event["occurred_at"])
    assert 599 <= (deadline - occurred).total_seconds() <= 601

    reply = await api(nc, s.API_NODE_UNDRAIN, m.UndrainNode(node=node))
    assert reply.ok, reply.error
    await eventually(lambda: events(nc, s.EVENT_SUBJECTS["NodeDrainCancelled"], since_seq=since))

    refused = await api(nc, s.API_NODE_DRAIN, m.DrainNode(node="no-such-node"))
    assert not refused.ok and refused.error is not None
    assert (refused.error.code, refused.error.field) == ("UNKNOWN_NODE", "node")
    both = await api(nc, s.API_NODE_DRAIN, m.DrainNode(node=node, deadline_s=5,
                                                       deadline=datetime.fromisoformat("2030-01-01T00:00:00+00:00")))
    assert not both.ok and both.error is not None and both.error.field == "deadline"
    # No `.<team>` twin: a team-scoped subject is no admin command.
    scoped = await api(nc, f"{s.API_NODE_DRAIN}.nlp", m.DrainNode(node=node))
    assert not scoped.ok and scoped.error is not None and scoped.error.code == "UNKNOWN_SUBJECT"


def test_node_commands_are_no_teams_or_consoles() -> None:
    for subject in (s.API_NODE_DRAIN, s.API_NODE_UNDRAIN, s.SCHEDULER_NODES):
        assert not any(_matches(p, subject) for p in team_permissions("nlp").publish)
        assert not any(_matches(p, subject) for p in console_permissions().publish)


def _matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: `*` one token, `>` the rest."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)
