"""The published JSON Schemas and Rota's own validation agree: what a schema validator
refuses, Rota refuses (commands, queries, events and the envelope), and what it accepts,
Rota accepts. The one documented exception is a float with no fraction (`2.0`), which JSON
Schema counts as an integer and Rota does not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from rota.contracts import ContractError, parse
from rota.contracts.envelope import MESSAGE_TYPES

SCHEMAS = Path(__file__).resolve().parents[2] / "contracts" / "schemas"
ID = "0193a000-0000-7000-8000-000000000001"
SPEC = {"name": "a", "team": "nlp", "user": "al", "queue": "training", "flavor": "a100",
        "submission_id": "s1"}
RUN = {"run_id": ID, "job_id": ID}


def message(type_: str, data: dict[str, Any], **header: Any) -> dict[str, Any]:
    return {"id": ID, "type": type_, "version": 1, "occurred_at": "2026-12-01T10:00:00Z",
            "source": "test", "job_id": None, "run_id": None, "data": data, **header}


def schema_accepts(doc: dict[str, Any]) -> bool:
    schema = json.loads((SCHEMAS / f"{doc['type']}.json").read_text())
    try:
        jsonschema.validate(doc, schema, format_checker=jsonschema.FormatChecker())
    except jsonschema.ValidationError:
        return False
    return True


def rota_refusal(doc: dict[str, Any]) -> str | None:
    try:
        parse(json.dumps(doc).encode(), MESSAGE_TYPES[doc["type"]], max_bytes=65536)
    except ContractError as exc:
        return f"{exc.code} {exc.field}"
    return None


REFUSED = {
    "a command's integer as a string": (message("SubmitJob", {**SPEC, "workers": "2"}),
                                        "data.workers"),
    "a command's boolean as yes": (message("SubmitJob", {**SPEC, "resumable": "yes"}),
                                   "data.resumable"),
    "a command's boolean as off": (message("SubmitJob", {**SPEC, "resumable": "off"}),
                                   "data.resumable"),
    "a command's integer as a boolean": (message("SubmitJob", {**SPEC, "workers": True}),
                                         "data.workers"),
    "a nested number as a string": (message("SubmitJob", {**SPEC, "sim": {"duration_s": "5"}}),
                                    "data.sim.duration_s"),
    "the version as a string": (message("SubmitJob", SPEC, version="1"), "version"),
    "the version as a boolean": (message("CancelJob", {"job_id": ID, "team": "nlp"},
                                         version=True), "version"),
    "a query's version as a string": (message("GetJob", {"job_id": "0193a000"}, version="1"),
                                      "version"),
    "a query's integer as a string": (message("ListJobs", {"limit": "2"}), "data.limit"),
    "a query's boolean as yes": (message("ListNotifications", {"failed": "yes"}), "data.failed"),
    "a query's boolean as off": (message("ListPreemptions", {"open": "off"}), "data.open"),
    "a query's boolean as 0": (message("ListAllocations", {"active_only": 0}),
                               "data.active_only"),
    "a reply's boolean as yes": (message("ApiReply", {"ok": "yes"}), "data.ok"),
    "an event's integer as a string": (message("RunFinished", {**RUN, "exit_code": "0"}),
                                       "data.exit_code"),
    "an event's boolean as off": (message("RunStopped", {**RUN, "reason": "preempted",
                                                         "forced": "off"}), "data.forced"),
    "a time as a Unix timestamp": (message("SubmitJob", SPEC, occurred_at=1764583200),
                                   "occurred_at"),
    "a time without its offset": (message("SubmitJob", SPEC, occurred_at="2026-12-01T10:00:00"),
                                  "occurred_at"),
    "a date for a time": (message("JobSubmitted", {"job_id": ID, "spec": SPEC,
                                                   "submitted_at": "2026-12-01"}),
                          "data.submitted_at"),
    "a tier in capitals": (message("SubmitJob", {**SPEC, "queue": "Training"}), "data.queue"),
    "an unknown field in a command": (message("SubmitJob", {**SPEC, "gpus": 8}), "data.gpus"),
    "an unknown field in the envelope": (message("GetJob", {"job_id": "0193a000"}, extra=1),
                                         "extra"),
}


@pytest.mark.parametrize("doc,field", REFUSED.values(), ids=REFUSED.keys())
def test_what_the_schema_refuses_rota_refuses_naming_the_field(doc: dict[str, Any],
                                                               field: str) -> None:
    assert not schema_accepts(doc)
    assert rota_refusal(doc) == f"INVALID_FIELD {field}"


ACCEPTED = {
    "a spec with defaults": message("SubmitJob", SPEC),
    "a whole number for a float": message("SubmitJob", {**SPEC, "sim": {"duration_s": 5}}),
    "a time with an offset and fraction": message("SubmitJob", SPEC,
                                                  occurred_at="2026-12-01T10:00:00.123+01:00"),
    "an event with a field from a newer producer": message(
        "RunFinished", {**RUN, "exit_code": 0, "added_later": True}),
    "a query by id prefix": message("GetJob", {"job_id": "0193a000"}),
}


@pytest.mark.parametrize("doc", ACCEPTED.values(), ids=ACCEPTED.keys())
def test_what_the_schema_accepts_rota_accepts(doc: dict[str, Any]) -> None:
    assert schema_accepts(doc) and rota_refusal(doc) is None


def test_the_one_documented_difference_a_float_with_no_fraction() -> None:
    doc = message("SubmitJob", {**SPEC, "workers": 2.0})
    assert schema_accepts(doc)  # JSON Schema: 2.0 is an integer
    assert rota_refusal(doc) == "INVALID_FIELD data.workers"
