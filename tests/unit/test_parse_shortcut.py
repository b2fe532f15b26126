"""The parser's shortcut (envelope and data validated in one pass) against the checked path it
stands beside: for any message, valid or broken, both give the same envelope or the same
error, code, field and words."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from rota.contracts import ContractError, Envelope, envelope, parse, parse_any
from rota.contracts import messages as m
from rota.contracts.envelope import MESSAGE_TYPES, parse_any_reference, parse_reference
from rota.contracts.job import WorkerPlacement
from rota.ids import new_id

from tests.builders import spec_doc, submit_job
from tests.unit.notifier.events import completed, pending, run_stopped

MAX = 64 * 1024
AT = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _corpus() -> list[Envelope[Any]]:
    job_id, run_id = new_id(), new_id()
    spec = m.JobSpec.model_validate(spec_doc(workers=2, gpus_per_worker=4))
    placement = [WorkerPlacement(worker=0, node="n1", gpus=[0, 1, 2, 3]),
                 WorkerPlacement(worker=1, node="n2", gpus=[4, 5, 6, 7])]
    allocation = {"proposal_id": new_id(), "job_id": job_id, "run_id": run_id, "team": "nlp",
                  "flavor": "h100", "placement": placement, "gpus": 8}
    return [
        envelope(submit_job(labels={"project": "llm"}), source="cli"),
        envelope(m.JobSubmitted(job_id=job_id, spec=spec, submitted_at=AT, command_id=new_id(),
                                submission_id=spec.submission_id), source="submission", job_id=job_id),
        pending(AT, job_id),
        envelope(m.AllocationProposed(**allocation, user="alice", queue="training",
                                      borrowed_gpus=2), source="scheduler", job_id=job_id),
        envelope(m.AllocationGranted(**allocation), source="ledger", job_id=job_id, run_id=run_id),
        envelope(m.StartRun(run_id=run_id, job_id=job_id, attempt=1, spec=spec,
                            placement=placement), source="scheduler", job_id=job_id),
        envelope(m.RunStarted(run_id=run_id, job_id=job_id, attempt=1, placement=placement,
                              resumed_from="s3://ckpt/1"), source="executor", run_id=run_id),
        envelope(m.RunFinished(run_id=run_id, job_id=job_id, exit_code=0), source="executor"),
        run_stopped(AT + timedelta(minutes=5), job_id),
        completed(AT, [job_id, new_id()]),
    ]


CORPUS = [json.loads(env.to_bytes()) for env in _corpus()]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=8) | st.sampled_from([new_id(), "2026-01-01T00:00:00Z", "h100", "n1"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def broken(draw: st.DrawFn) -> bytes:
    """A corpus message with a few random edits: a field dropped, replaced or added, at the
    top or in `data`, or its type swapped for another."""
    doc = json.loads(json.dumps(draw(st.sampled_from(CORPUS))))
    for _ in range(draw(st.integers(0, 3))):
        target = doc if draw(st.booleans()) or not isinstance(doc.get("data"), dict) else doc["data"]
        edit = draw(st.sampled_from(["drop", "replace", "add", "type"]))
        if edit == "type":
            doc["type"] = draw(st.sampled_from([*MESSAGE_TYPES, "NoSuchType", 7]))
        elif edit == "add":
            target[draw(st.text(min_size=1, max_size=6))] = draw(json_values)
        elif target:
            key = draw(st.sampled_from(sorted(target)))
            if edit == "drop":
                del target[key]
            else:
                target[key] = draw(json_values)
    return json.dumps(doc).encode()


def outcome(parse_one: Any, raw: bytes) -> tuple[str, Any]:
    try:
        env = parse_one(raw)
    except ContractError as exc:
        return "error", (exc.code, exc.field, exc.message)
    return "parsed", (type(env), env.to_bytes())


@pytest.mark.parametrize("doc", CORPUS, ids=[d["type"] for d in CORPUS])
def test_a_valid_message_parses_the_same_both_ways(doc: dict[str, Any]) -> None:
    raw = json.dumps(doc).encode()
    fast = parse_any(raw, max_bytes=MAX)
    assert fast == parse_any_reference(raw, max_bytes=MAX)
    assert fast.to_bytes() == raw.replace(b", ", b",").replace(b": ", b":")
    model: type[BaseModel] = MESSAGE_TYPES[doc["type"]]
    assert parse(raw, model, max_bytes=MAX) == parse_reference(raw, model, max_bytes=MAX)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=broken(), expected=st.sampled_from([m.SubmitJob, m.JobSubmitted, m.RunStarted]))
def test_any_message_gets_the_same_answer_both_ways(raw: bytes, expected: type[BaseModel]) -> None:
    assert outcome(lambda r: parse_any(r, max_bytes=MAX), raw) == outcome(
        lambda r: parse_any_reference(r, max_bytes=MAX), raw)
    assert outcome(lambda r: parse(r, expected, max_bytes=MAX), raw) == outcome(
        lambda r: parse_reference(r, expected, max_bytes=MAX), raw)
