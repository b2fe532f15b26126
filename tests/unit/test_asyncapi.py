"""The AsyncAPI document is complete enough to build a client from: every reference
resolves, every request declares its reply, and every subject Rota uses is a channel."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote

import yaml
from rota.contracts import subjects as s

DOCUMENT = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "contracts" / "asyncapi.yaml").read_text())


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for value in node.values() for r in refs(value)]
    if isinstance(node, list):
        return [r for value in node for r in refs(value)]
    return []


def resolve(ref: str) -> Any:
    node: Any = DOCUMENT
    for part in ref.removeprefix("#/").split("/"):
        node = node[unquote(part)]
    return node


def test_every_reference_resolves() -> None:
    for ref in refs(DOCUMENT):
        assert resolve(ref) is not None, ref


def addresses() -> set[str]:
    return {c["address"] for c in DOCUMENT["channels"].values() if c.get("address")}


def test_every_request_declares_its_reply_and_commands_none() -> None:
    for name, operation in DOCUMENT["operations"].items():
        address = resolve(operation["channel"]["$ref"])["address"]
        is_request = address.startswith(("rota.api.", "rota.sys.", "rota.run.",
                                          "$JS.API.DIRECT.GET."))
        assert ("reply" in operation) == is_request, name


def test_every_subject_rota_uses_is_a_channel() -> None:
    wanted = {
        "rota.cmd.submit.{team}", "rota.cmd.cancel.{team}", s.RUN_START, s.RUN_STOP,
        "rota.api.submit.{team}", s.API_SUBMIT, "rota.api.cancel.{team}", *s.TEAM_QUERIES,
        s.NOTIFICATIONS_LIST, s.LEDGER_ALLOCATIONS, s.PREEMPTION_PLANS,
        "rota.sys.deadletter.{service}", "rota.sys.ping.{service}", "rota.ctl.run.{run_id}",
        "rota.run.checkpoint.{run_id}", *s.EVENT_SUBJECTS.values(),
        *(f"{query}.{{team}}" for query in s.TEAM_QUERIES), "rota.api.ping.{team}",
        "$JS.API.DIRECT.GET.ROTA_CTL.rota.ctl.run.{run_id}",
        *(s.feed("{team}", s.EVENT_SUBJECTS[name]) for name in s.FEED_TYPES),
    }
    assert wanted <= addresses(), sorted(wanted - addresses())


def test_descriptions_name_their_own_subject_and_do_not_contradict() -> None:
    channels = {c["address"]: c.get("description", "") for c in DOCUMENT["channels"].values()
                if c.get("address")}
    for query in (s.API_JOB_WHY, s.API_JOB_TRACE):
        assert s.API_JOB_GET not in channels[query], query
    assert "must equal" not in channels[s.API_SUBMIT]
