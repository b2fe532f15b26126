"""The version policy (contracts/CHANGELOG.md): an incompatible change to a schema, an
identity's permissions or the channels fails unless its version goes up; additive changes
(an optional field, an enum value such as a new wait reason) pass."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from rota.contractgen.spec import current_release, release_problems
from rota.contracts import ContractError, envelope, parse, parse_any
from rota.contracts import messages as m
from rota.contracts.compat import Release, schema_breaks, subject_covers, version_problems
from rota.contracts.release import released
from rota.contracts.versions import PROTOCOL_VERSION, message_version
from rota.ids import new_id

CONTRACTS = Path(__file__).resolve().parents[2] / "contracts"
MAX = 64 * 1024


@pytest.fixture(scope="module")
def code() -> Release:
    return current_release()


def test_the_code_breaks_no_release_without_its_bump() -> None:
    assert release_problems(CONTRACTS) == []


def test_the_last_release_is_the_codes_protocol_version() -> None:
    number, _ = released(CONTRACTS)[-1]
    assert number == PROTOCOL_VERSION, "run `rota contracts release` after a protocol bump"


def test_version_1_to_2_is_incompatible_in_what_the_changelog_says() -> None:
    """Had the versions stayed at 1, the check would name each change the changelog lists."""
    v1, v2 = (Release.read(CONTRACTS / "released" / v) for v in ("v1", "v2"))
    unbumped = dataclasses.replace(v2, protocol_version=1,
                                   message_versions=dict.fromkeys(v2.message_versions, 1))
    problems = "\n".join(version_problems(v1, unbumped))
    for expected in ("RunCheckpointed (version 1, not bumped): data.run_token: removed",
                     "StartRun (version 1, not bumped): data.run_token: removed",
                     "run: may no longer publish 'rota.evt.run.checkpointed'",
                     "run: may no longer publish '$JS.API.CONSUMER.CREATE.ROTA_CTL'",
                     "team: may no longer subscribe 'rota.evt.>'",
                     "team: inbox prefix '_INBOX' became '_INBOX_team_<team>'"):
        assert expected in problems
    assert version_problems(v1, v2) == []
    changelog = (CONTRACTS / "CHANGELOG.md").read_text()
    for name in ("RunCheckpointed", "StartRun", "ROTA_CTL", "rota.evt.>", "_INBOX_team_"):
        assert name in changelog


def _with_schema(release: Release, name: str, schema: dict[str, Any]) -> Release:
    return dataclasses.replace(release, schemas={**release.schemas, name: schema})


def _data(schema: dict[str, Any], name: str) -> dict[str, Any]:
    definition: dict[str, Any] = schema["$defs"][name]
    return definition


def test_a_removed_event_field_fails_until_both_versions_go_up(code: Release) -> None:
    schema = copy.deepcopy(code.schemas["RunStarted"])
    del _data(schema, "RunStarted")["properties"]["attempt"]
    _data(schema, "RunStarted")["required"].remove("attempt")
    changed = _with_schema(code, "RunStarted", schema)
    problems = version_problems(code, changed)
    assert any("RunStarted (version 1, not bumped): data.attempt: removed" in p
               for p in problems)
    message_only = dataclasses.replace(
        changed, message_versions={**code.message_versions, "RunStarted": 2})
    assert [p for p in version_problems(code, message_only) if "protocol" in p]
    bumped = dataclasses.replace(message_only, protocol_version=code.protocol_version + 1)
    assert version_problems(code, bumped) == []


def test_a_new_wait_reason_is_additive(code: Release) -> None:
    schema = copy.deepcopy(code.schemas["JobPending"])
    schema["$defs"]["WaitReasonCode"]["enum"].append("NEW_REASON")
    assert version_problems(code, _with_schema(code, "JobPending", schema)) == []


def test_a_new_optional_field_is_additive_and_a_required_one_is_not(code: Release) -> None:
    optional = copy.deepcopy(code.schemas["SubmitJob"])
    _data(optional, "SubmitJob")["properties"]["note"] = {"type": "string", "maxLength": 64}
    assert version_problems(code, _with_schema(code, "SubmitJob", optional)) == []
    required = copy.deepcopy(optional)
    _data(required, "SubmitJob")["required"].append("note")
    assert version_problems(code, _with_schema(code, "SubmitJob", required)) != []


def test_a_command_field_narrowed_or_retyped_breaks(code: Release) -> None:
    schema = code.schemas["SubmitJob"]
    narrowed = copy.deepcopy(schema)
    workers = _data(narrowed, "SubmitJob")["properties"]["workers"]
    workers["maximum"] = workers["maximum"] - 1
    assert any("workers: maximum" in p
               for p in version_problems(code, _with_schema(code, "SubmitJob", narrowed)))
    widened = copy.deepcopy(schema)
    _data(widened, "SubmitJob")["properties"]["workers"]["maximum"] += 1
    assert version_problems(code, _with_schema(code, "SubmitJob", widened)) == []
    retyped = copy.deepcopy(schema)
    _data(retyped, "SubmitJob")["properties"]["workers"]["type"] = "string"
    assert any("workers: type" in p
               for p in version_problems(code, _with_schema(code, "SubmitJob", retyped)))


def test_an_input_enum_value_removed_breaks_and_output_tightening_does_not() -> None:
    old = {"properties": {"q": {"enum": ["a", "b"], "type": "string"}}}
    new = {"properties": {"q": {"enum": ["a"], "type": "string"}}}
    assert schema_breaks(old, new, "input") == ["q: enum values ['b'] removed"]
    assert schema_breaks(old, new, "output") == []
    looser = {"properties": {"q": {"type": ["string", "null"]}}, "required": []}
    assert schema_breaks({"properties": {"q": {"type": "string"}}, "required": ["q"]},
                         looser, "output") == ["q: type ['string'] became ['null', 'string']",
                                               "q: no longer required"]


def test_a_permission_taken_from_a_team_fails_without_a_protocol_bump(code: Release) -> None:
    team = code.identities["team"]
    fewer = {**team, "subscribe": [s for s in team["subscribe"] if "feed" not in s]}
    changed = dataclasses.replace(code, identities={**code.identities, "team": fewer})
    assert any("team: may no longer subscribe 'rota.feed.<team>.>'" in p
               for p in version_problems(code, changed))
    more = {**team, "publish": [*team["publish"], "rota.api.extra.<team>"]}
    assert version_problems(
        code, dataclasses.replace(code, identities={**code.identities, "team": more})) == []


def test_a_channel_removed_fails_without_a_protocol_bump(code: Release) -> None:
    fewer = dataclasses.replace(code, channels=[c for c in code.channels
                                                if c != "rota.feed.{team}.job.submitted"])
    assert version_problems(code, fewer) == [
        "protocol (version 2, not bumped): channel 'rota.feed.{team}.job.submitted' is gone"]


@pytest.mark.parametrize(("wide", "narrow", "covers"), [
    ("rota.>", "rota.evt.>", True), ("rota.evt.>", "rota.>", False),
    ("rota.*.x", "rota.a.x", True), ("rota.a.x", "rota.*.x", False),
    ("a.b", "a.b.c", False), ("a.>", "a", False), ("_INBOX.>", "_INBOX_team_x.>", False),
])
def test_subject_coverage(wide: str, narrow: str, covers: bool) -> None:
    assert subject_covers(wide, narrow) is covers


def test_envelopes_carry_their_types_version() -> None:
    ids = {"run_id": new_id(), "job_id": new_id()}
    checkpointed = envelope(m.RunCheckpointed(checkpoint_uri="s3://b/1", **ids), source="x")
    assert checkpointed.version == message_version("RunCheckpointed") == 2
    assert json.loads(checkpointed.to_bytes())["version"] == 2
    submitted = envelope(m.CancelJob(job_id=new_id(), team="nlp"), source="cli")
    assert submitted.version == 1


def test_a_reader_takes_older_versions_and_refuses_newer_ones() -> None:
    ids = {"run_id": new_id(), "job_id": new_id()}
    doc = json.loads(envelope(m.RunCheckpointed(checkpoint_uri="s3://b/1", **ids),
                              source="executor").to_bytes())
    # A version 1 event, kept on the stream from before, still replays (token and all).
    old = {**doc, "version": 1, "data": {**doc["data"], "run_token": "t" * 32}}
    assert parse_any(json.dumps(old).encode(), max_bytes=MAX).version == 1
    cancel = json.loads(envelope(m.CancelJob(job_id=new_id(), team="nlp"),
                                 source="cli").to_bytes())
    with pytest.raises(ContractError) as info:
        parse(json.dumps({**cancel, "version": 2}).encode(), m.CancelJob, max_bytes=MAX)
    assert info.value.field == "version" and "newer than this reader" in info.value.message
    with pytest.raises(ContractError) as info:
        parse_any(json.dumps({**doc, "version": 3}).encode(), max_bytes=MAX)
    assert info.value.field == "version"
