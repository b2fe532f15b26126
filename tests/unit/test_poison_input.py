"""Poison input: what Python's json accepts but no consumer or PostgreSQL can hold is refused
by the parser with a code and the field, and commands, queries and the header are strict."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel
from rota.contracts import ContractError, envelope, parse, parse_any
from rota.contracts import messages as m
from rota.contracts.strict_json import MAX_DEPTH

from tests.builders import spec_doc

MAX = 64 * 1024
MARK = '"@@"'


def raw_with(value_json: str, where: str = "name", *, model: str = "SubmitJob") -> bytes:
    """A SubmitJob whose `data.<where>` is the JSON text `value_json`, spliced in verbatim
    (json.dumps could not write most of these)."""
    doc = {"id": "0190b5c2-0000-7000-8000-000000000000", "type": model,
           "occurred_at": "2026-01-01T00:00:00Z", "source": "test",
           "data": {**spec_doc(), where: "@@"}}
    return json.dumps(doc).replace(MARK, value_json).encode()


def error_of(raw: bytes, expected: type[BaseModel] = m.SubmitJob) -> ContractError:
    with pytest.raises(ContractError) as info:
        parse(raw, expected, max_bytes=MAX)
    return info.value


@pytest.mark.parametrize(
    ("value", "where", "code", "field"),
    [
        ("1" * 5001, "workers", "INVALID_FIELD", "data.workers"),
        ("-" + "9" * 30, "gpus_per_worker", "INVALID_FIELD", "data.gpus_per_worker"),
        (str(2**63), "declared_runtime_s", "INVALID_FIELD", "data.declared_runtime_s"),
        ("[" * 3000 + "]" * 3000, "labels", "MALFORMED_JSON", None),
        ("[" * 40 + "]" * 40, "labels", "MALFORMED_JSON", None),
        ('{"duration_s": Infinity}', "sim", "INVALID_FIELD", "data.sim.duration_s"),
        ('{"duration_s": 10, "fail_after_s": -Infinity}', "sim", "INVALID_FIELD",
         "data.sim.fail_after_s"),
        ('{"duration_s": NaN}', "sim", "INVALID_FIELD", "data.sim.duration_s"),
        ('{"duration_s": 10, "fail_after_s": 1e999}', "sim", "INVALID_FIELD",
         "data.sim.fail_after_s"),
        ('"a\\u0000b"', "name", "INVALID_FIELD", "data.name"),
        ('{"k": "v\\u0000"}', "labels", "INVALID_FIELD", "data.labels.k"),
        ('{"k\\u0000": "v"}', "labels", "INVALID_FIELD", "data.labels"),
        ('{"command": ["ok", "x\\u0000"]}', "local", "INVALID_FIELD", "data.local.command.1"),
        ('"\\ud800"', "name", "INVALID_FIELD", "data.name"),
    ],
)
def test_poison_is_refused_with_the_field(value: str, where: str, code: str,
                                          field: str | None) -> None:
    err = error_of(raw_with(value, where))
    if code == "MALFORMED_JSON":  # too deep: the path where it went too deep, when known
        assert err.code == code and f"deeper than {MAX_DEPTH}" in err.message
        assert err.field is None or err.field.startswith("data.labels.0.0")
    else:
        assert (err.code, err.field) == (code, field), err


def test_parse_any_refuses_poison_too() -> None:
    for value in ("1" * 5001, "[" * 3000 + "]" * 3000, "NaN", '"\\u0000"'):
        with pytest.raises(ContractError):
            parse_any(raw_with(value), max_bytes=MAX)


def test_nesting_at_the_limit_is_fine() -> None:
    # The envelope is level 1, data level 2, labels level 3: the most is MAX_DEPTH in all.
    doc = json.loads(envelope(m.JobRejected(code="X", message="y"), source="t").to_bytes())
    inner: object = 1
    for _ in range(MAX_DEPTH - 2):
        inner = [inner]
    doc["data"]["extra"] = inner
    parse_any(json.dumps(doc).encode(), max_bytes=MAX)
    doc["data"]["extra"] = [inner]
    with pytest.raises(ContractError) as info:
        parse_any(json.dumps(doc).encode(), max_bytes=MAX)
    assert info.value.code == "MALFORMED_JSON"


def test_big_but_valid_numbers_and_escapes_pass() -> None:
    raw = raw_with('"caf\\u00e9-\\ud83d\\ude00"', "name")  # a surrogate pair is fine
    with pytest.raises(ContractError) as info:  # the name's pattern, not the parser, refuses
        parse(raw, m.SubmitJob, max_bytes=MAX)
    assert info.value.field == "data.name" and "surrogate" not in info.value.message
    ok = raw_with('{"k": "v\\\\u0000"}', "labels")  # an escaped backslash, not a NUL
    assert parse(ok, m.SubmitJob, max_bytes=MAX).data.labels == {"k": "v\\u0000"}


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ('"8"', "gpus_per_worker"),
        ("true", "gpus_per_worker"),
        ("8.0", "gpus_per_worker"),
        ('"2"', "workers"),
        ('"yes"', "resumable"),
        ("1", "resumable"),
        ('"3600"', "declared_runtime_s"),
        ('{"duration_s": "60"}', "sim"),
    ],
)
def test_commands_are_strict(value: str, where: str) -> None:
    err = error_of(raw_with(value, where))
    assert err.code == "INVALID_FIELD"
    assert err.field is not None and err.field.startswith(f"data.{where}")


def test_the_header_is_strict() -> None:
    doc = json.loads(raw_with('"x"'))
    doc["version"] = "1"
    err = error_of(json.dumps(doc).encode())
    assert (err.field, err.message) == ("version", "Input should be a valid integer")


def test_strict_error_names_the_field() -> None:
    err = error_of(raw_with('"8"', "gpus_per_worker"))
    assert str(err) == "data.gpus_per_worker: Input should be a valid integer"


def test_queries_are_strict() -> None:
    env = json.loads(envelope(m.ListJobs(), source="cli").to_bytes())
    env["data"] = {"limit": "10"}
    err = error_of(json.dumps(env).encode(), m.ListJobs)
    assert (err.code, err.field) == ("INVALID_FIELD", "data.limit")
    env["data"] = {"team": "nlp", "queue": "training", "limit": 10}
    assert parse(json.dumps(env).encode(), m.ListJobs, max_bytes=MAX).data.limit == 10


def test_datetimes_still_parse_from_rfc3339_strings() -> None:
    doc = json.loads(raw_with('"x"'))
    doc["occurred_at"] = "2026-01-01T00:00:00.123+02:00"
    env = parse(json.dumps(doc).encode(), m.SubmitJob, max_bytes=MAX)
    assert env.occurred_at.utcoffset() is not None and env.occurred_at.hour == 0


def test_floats_accept_integer_literals() -> None:
    raw = raw_with('{"duration_s": 60}', "sim")
    sim = parse(raw, m.SubmitJob, max_bytes=MAX).data.sim
    assert sim is not None and sim.duration_s == 60.0
