"""Contract validation: strict commands, bounded fields, errors that name the field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError
from rota.contractgen.spec import differences
from rota.contracts import ContractError, envelope, parse, parse_any
from rota.contracts import messages as m
from rota.contracts.envelope import first_error
from rota.ids import derived_id, new_id

from tests.builders import spec_doc, submit_job

MAX = 64 * 1024
REPO = Path(__file__).resolve().parents[2]


def raw_submit(**overrides: object) -> bytes:
    doc = spec_doc(**overrides)
    return json.dumps({"id": new_id(), "type": "SubmitJob", "occurred_at": "2026-01-01T00:00:00Z",
                       "source": "test", "data": doc}).encode()


def error_of(raw: bytes) -> ContractError:
    with pytest.raises(ContractError) as info:
        parse(raw, m.SubmitJob, max_bytes=MAX)
    return info.value


def test_round_trip_keeps_every_field() -> None:
    spec = submit_job(labels={"project": "llm"}, sim={"duration_s": 60, "checkpoint_interval_s": 10})
    env = envelope(spec, source="cli")
    parsed = parse(env.to_bytes(), m.SubmitJob, max_bytes=MAX)
    assert parsed.data == spec
    assert parsed.id == env.id and parsed.type == "SubmitJob" and parsed.version == 1


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"workers": 0}, "data.workers"),
        ({"workers": 5000}, "data.workers"),
        ({"gpus_per_worker": 17}, "data.gpus_per_worker"),
        ({"team": "NLP!"}, "data.team"),
        ({"name": "x" * 129}, "data.name"),
        ({"queue": "urgent"}, "data.queue"),
        ({"declared_runtime_s": -5}, "data.declared_runtime_s"),
        ({"labels": {f"k{i}": "v" for i in range(33)}}, "data.labels"),
        ({"unexpected": 1}, "data.unexpected"),
        ({"sim": {"duration_s": 10, "extra": 1}}, "data.sim.extra"),
        ({"resumable": False, "sim": {"duration_s": 10, "checkpoint_interval_s": 5}},
         "data.sim.checkpoint_interval_s"),
        ({"local": {"command": []}}, "data.local.command"),
        ({"flavors": ["a100", "h100"]}, "data.flavors"),
        ({"flavors": ["h100", "any", "a100"]}, "data.flavors"),
        ({"flavors": ["h100", "h100"]}, "data.flavors"),
        ({"flavors": []}, "data.flavors"),
    ],
)
def test_invalid_fields_are_named(overrides: dict[str, object], field: str) -> None:
    err = error_of(raw_submit(**overrides))
    assert err.code == "INVALID_FIELD"
    assert err.field == field


def test_a_flavor_list_expands_any_over_the_cluster_after_the_named_ones() -> None:
    cluster = ("h100", "a100", "t4", "l4")
    assert submit_job().fallback_flavors(cluster) == ()
    assert submit_job(flavors=["h100"]).fallback_flavors(cluster) == ()
    assert submit_job(flavors=["h100", "t4"]).fallback_flavors(cluster) == ("t4",)
    assert submit_job(flavors=["h100", "t4", "any"]).fallback_flavors(cluster) == ("t4", "a100", "l4")


def test_unknown_field_says_so() -> None:
    assert error_of(raw_submit(gpu=8)).message == "unknown field"


@pytest.mark.parametrize(
    ("raw", "code", "field"),
    [
        (b"{nope", "MALFORMED_JSON", None),
        (b"[1, 2]", "MALFORMED_JSON", None),
        (b"\xff\xfe", "MALFORMED_JSON", None),
        (b'{"id": "not-a-uuid"}', "INVALID_FIELD", "id"),
        (b"x" * (MAX + 1), "PAYLOAD_TOO_LARGE", None),
    ],
)
def test_malformed_messages(raw: bytes, code: str, field: str | None) -> None:
    err = error_of(raw)
    assert (err.code, err.field) == (code, field)


def test_a_message_of_another_type_is_refused() -> None:
    env = envelope(m.CancelJob(job_id=new_id(), team="nlp"), source="t")
    err = error_of(env.to_bytes())
    assert (err.code, err.field) == ("WRONG_TYPE", "type")


def test_envelope_rejects_unknown_top_level_fields() -> None:
    doc = json.loads(raw_submit())
    doc["extra"] = True
    err = error_of(json.dumps(doc).encode())
    assert err.field == "extra"


def test_events_ignore_fields_added_by_newer_producers() -> None:
    env = envelope(m.RunFinished(run_id=new_id(), job_id=new_id()), source="executor")
    doc = json.loads(env.to_bytes())
    doc["data"]["added_in_v1_7"] = "ok"
    parsed = parse_any(json.dumps(doc).encode(), max_bytes=MAX)
    assert isinstance(parsed.data, m.RunFinished)


def test_parse_any_refuses_unknown_types() -> None:
    doc = json.loads(raw_submit())
    doc["type"] = "LaunchMissiles"
    with pytest.raises(ContractError) as info:
        parse_any(json.dumps(doc).encode(), max_bytes=MAX)
    assert (info.value.code, info.value.field) == ("UNKNOWN_TYPE", "type")


def test_ids_are_uuid7_and_derived_ids_are_stable() -> None:
    from datetime import UTC, datetime

    at = datetime(2026, 3, 1, tzinfo=UTC)
    assert new_id()[14] == "7"
    assert derived_id("seed", at) == derived_id("seed", at)
    assert derived_id("seed", at) != derived_id("other", at)
    assert derived_id("seed", at)[14] == "7"
    m.CancelJob(job_id=derived_id("seed", at), team="nlp")  # a valid Uuid


def test_first_error_of_a_plain_validation_error() -> None:
    with pytest.raises(ValidationError) as info:
        m.ListJobs.model_validate({"limit": 0})
    err = first_error(info.value)
    assert err.field == "limit"


def test_generated_contracts_match_the_code() -> None:
    stale = differences(REPO / "contracts")
    assert stale == [], f"run `uv run rota contracts generate`; stale: {stale}"


def test_an_elastic_worker_range_is_workers_and_workers_min() -> None:
    job = submit_job(workers={"min": 2, "max": 8})
    assert (job.workers, job.workers_min, job.min_workers, job.total_gpus) == (8, 2, 2, 64)
    assert submit_job(workers=8, workers_min=2, submission_id=job.submission_id) == job
    rigid = submit_job(workers=3)
    assert (rigid.workers_min, rigid.min_workers) == (None, 3)
    assert "workers_min" not in rigid.model_dump(exclude_none=True)


@pytest.mark.parametrize(
    ("workers", "extra", "words"),
    [
        ({"min": 0, "max": 8}, {}, "workers.min: must be between 1 and 1024"),
        ({"min": 2, "max": 2000}, {}, "workers.max: must be between 1 and 1024"),
        ({"min": 4, "max": 2}, {}, "workers: min 4 is above max 2"),
        ({"min": 2}, {}, "workers: an elastic range is {min: N, max: M}"),
        ({"min": 2, "max": 4, "step": 1}, {}, "workers: an elastic range is {min: N, max: M}"),
        ({"min": 2.5, "max": 4}, {}, "workers.min: must be a whole number"),
        ({"min": 2, "max": 4}, {"workers_min": 2}, "workers_min: give it or workers: {min, max}"),
        (4, {"workers_min": 5}, "workers: min 5 is above max 4"),
    ],
)
def test_a_bad_worker_range_names_its_field(workers: object, extra: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(words)):
        submit_job(workers=workers, **extra)
