"""Notices to deliveries: who hears about what, on which channel. Pure.

Rules:
- The job's owner hears through every channel they have a contact for, unless they opted out
  of that kind (`opt_out: [run_started, ...]` or `[all]`).
- The preemption notice cannot be opted out of. `preemption_channel` only picks its channel;
  if that channel is unavailable it goes out on the others, because someone must hear.
- The team's channel and address hear about preemptions and budget warnings only, to keep
  them quiet. A budget warning concerns no one job, so only the team hears it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from rota.config import RotaConfig
from rota.config.model import Contact, Team

from rota_notifier.domain import Kind, Notice


class Channel(StrEnum):
    slack = "slack"
    email = "email"


PROTECTED: frozenset[Kind] = frozenset({Kind.preemption_noticed})
"""Kinds nobody can opt out of."""

TEAM_KINDS: frozenset[Kind] = frozenset(
    {Kind.preemption_noticed, Kind.preemption_completed, Kind.budget_warning})
OPT_OUT_ALL = "all"


@dataclass(frozen=True)
class Delivery:
    """One row to write: `recipient` is `user:<team>/<user>` or `team:<team>`."""

    recipient: str
    channel: Channel
    address: str
    recipient_kind: str
    timezone: str


def _user_channels(contact: Contact, available: frozenset[Channel]) -> dict[Channel, str]:
    found: dict[Channel, str] = {}
    if contact.slack_id and Channel.slack in available:
        found[Channel.slack] = contact.slack_id
    if contact.email and Channel.email in available:
        found[Channel.email] = contact.email
    return found


def _user_deliveries(
    notice: Notice, team_name: str, contact: Contact, available: frozenset[Channel]
) -> list[Delivery]:
    channels = _user_channels(contact, available)
    kind = notice.kind
    if kind not in PROTECTED and (kind.value in contact.opt_out
                                  or OPT_OUT_ALL in contact.opt_out):
        return []
    preferred = contact.preemption_channel
    if kind in TEAM_KINDS and preferred is not None and Channel(preferred) in channels:
        channels = {Channel(preferred): channels[Channel(preferred)]}
    recipient = f"user:{team_name}/{notice.user}"
    return [Delivery(recipient, ch, address, "user", contact.timezone)
            for ch, address in sorted(channels.items())]


def _team_deliveries(team_name: str, team: Team, available: frozenset[Channel]) -> list[Delivery]:
    out: list[Delivery] = []
    if team.slack_channel and Channel.slack in available:
        out.append(Delivery(f"team:{team_name}", Channel.slack, team.slack_channel, "team", "UTC"))
    if team.email and Channel.email in available:
        out.append(Delivery(f"team:{team_name}", Channel.email, team.email, "team", "UTC"))
    return out


def route(notice: Notice, config: RotaConfig, available: frozenset[Channel]) -> list[Delivery]:
    """Every (recipient, channel) that should get `notice`, with its address."""
    team = config.teams.get(notice.team)
    if team is None:
        return []
    out: list[Delivery] = []
    contact = team.users.get(notice.user) if notice.user else None
    if contact is not None:
        out.extend(_user_deliveries(notice, notice.team, contact, available))
    if notice.kind in TEAM_KINDS:
        out.extend(_team_deliveries(notice.team, team, available))
    return out


def unknown_opt_outs(config: RotaConfig) -> list[str]:
    """`opt_out` entries that do nothing: unknown kinds, or protected ones. Warned at start."""
    known = {k.value for k in Kind} | {OPT_OUT_ALL}
    problems: list[str] = []
    for t, team in config.teams.items():
        for u, contact in team.users.items():
            for entry in contact.opt_out:
                where = f"teams.{t}.users.{u}.opt_out: {entry!r}"
                if entry not in known:
                    problems.append(f"{where} is not a notification kind")
                elif entry in PROTECTED:
                    problems.append(f"{where} cannot be opted out of")
    return problems
