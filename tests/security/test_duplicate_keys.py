"""A message that says two things at once: the same key twice in one JSON object. Python
would believe the last, another reader (a proxy, an audit log, a consumer in another
language) the first; every Rota consumer refuses it, naming the key."""

from __future__ import annotations

import pytest
from rota.contracts import ContractError, envelope, parse
from rota.contracts import messages as m

from tests.builders import submit_job

LIMIT = 1_000_000


def _with_second(raw: bytes, key: bytes, value: bytes) -> bytes:
    """`raw` with `key` said again, right after its first appearance."""
    at = raw.index(b'"' + key + b'":')
    return raw[:at] + b'"' + key + b'":' + value + b"," + raw[at:]


@pytest.mark.parametrize(("key", "value", "field"), [
    (b"team", b'"vision"', "data.team"),
    (b"type", b'"CancelJob"', "type"),
    (b"gpus_per_worker", b"1", "data.gpus_per_worker"),
])
def test_a_repeated_key_is_refused_naming_it(key: bytes, value: bytes, field: str) -> None:
    raw = envelope(submit_job(team="nlp"), source="test").to_bytes()
    with pytest.raises(ContractError) as refused:
        parse(_with_second(raw, key, value), m.SubmitJob, max_bytes=LIMIT)
    assert refused.value.field == field
    assert "twice" in refused.value.message


def test_a_message_with_each_key_once_still_parses() -> None:
    raw = envelope(submit_job(team="nlp", labels={"a": "1", "b": "2"}), source="test").to_bytes()
    assert parse(raw, m.SubmitJob, max_bytes=LIMIT).data.team == "nlp"
