"""Who hears about what, on which channel: opt-outs, the preemption notice, team channels."""

from __future__ import annotations

from typing import Any

import pytest
from rota.config import parse_config
from rota_notifier.domain import Kind, Notice
from rota_notifier.routing import Channel, route, unknown_opt_outs

from tests.unit.notifier.events import CONFIG, rota_config

BOTH = frozenset({Channel.slack, Channel.email})


def notice(kind: Kind, user: str | None = "alice", team: str = "ml") -> Notice:
    return Notice(kind, "evt-1", "evt-1", "job-1", team, user, {})


def targets(kind: Kind, user: str | None = "alice", available: frozenset[Channel] = BOTH,
            config: Any = None) -> list[tuple[str, str, str]]:
    return [(d.recipient, d.channel.value, d.address)
            for d in route(notice(kind, user), config or rota_config(), available)]


@pytest.mark.parametrize("kind, expected", [
    (Kind.preemption_noticed, [
        ("user:ml/alice", "email", "alice@example.com"), ("user:ml/alice", "slack", "U0ALICE"),
        ("team:ml", "slack", "C0MLTEAM"), ("team:ml", "email", "ml-team@example.com")]),
    (Kind.preemption_completed, [
        ("user:ml/alice", "email", "alice@example.com"), ("user:ml/alice", "slack", "U0ALICE"),
        ("team:ml", "slack", "C0MLTEAM"), ("team:ml", "email", "ml-team@example.com")]),
    (Kind.run_failed, [
        ("user:ml/alice", "email", "alice@example.com"), ("user:ml/alice", "slack", "U0ALICE")]),
    (Kind.long_wait, [
        ("user:ml/alice", "email", "alice@example.com"), ("user:ml/alice", "slack", "U0ALICE")]),
])
def test_owner_everywhere_and_team_only_for_preemptions(
    kind: Kind, expected: list[tuple[str, str, str]]
) -> None:
    assert targets(kind) == expected


def test_opt_out_by_kind_but_never_out_of_the_preemption_notice() -> None:
    assert targets(Kind.run_failed, user="bob") == []
    assert targets(Kind.run_started, user="bob") != []
    # bob opted for email: his notice goes by email only, and it still goes.
    assert [t for t in targets(Kind.preemption_noticed, user="bob") if "bob" in t[0]] == [
        ("user:ml/bob", "email", "bob@example.com")]


def test_opt_out_all_silences_everything_but_the_preemption_notice() -> None:
    doc = {**CONFIG, "teams": {"ml": {**CONFIG["teams"]["ml"], "users": {
        "carol": {"email": "carol@example.com", "opt_out": ["all", "preemption_noticed"]}}}}}
    config = parse_config(doc)
    for kind in (Kind.run_failed, Kind.run_started, Kind.long_wait, Kind.preemption_completed):
        assert [t for t in targets(kind, "carol", config=config) if "carol" in t[0]] == []
    assert [t for t in targets(Kind.preemption_noticed, "carol", config=config)
            if "carol" in t[0]] == [("user:ml/carol", "email", "carol@example.com")]
    assert unknown_opt_outs(config) == [
        "teams.ml.users.carol.opt_out: 'preemption_noticed' cannot be opted out of"]


def test_preferred_channel_unavailable_still_reaches_someone() -> None:
    # bob prefers email, but only Slack is configured: the notice goes by Slack.
    got = targets(Kind.preemption_noticed, user="bob", available=frozenset({Channel.slack}))
    assert ("user:ml/bob", "slack", "U0BOB") in got


def test_unconfigured_channels_and_unknown_people_route_nowhere() -> None:
    assert targets(Kind.run_failed, available=frozenset()) == []
    assert targets(Kind.run_failed, user="mallory") == []
    assert route(notice(Kind.run_failed, team="ghosts"), rota_config(), BOTH) == []


def test_unknown_opt_out_names_are_reported() -> None:
    doc = {**CONFIG, "teams": {"ml": {**CONFIG["teams"]["ml"], "users": {
        "dan": {"email": "dan@example.com", "opt_out": ["run_faild"]}}}}}
    assert unknown_opt_outs(parse_config(doc)) == [
        "teams.ml.users.dan.opt_out: 'run_faild' is not a notification kind"]
