"""An envelope's class outlives its envelopes: pydantic caches `Envelope[model]` only weakly,
and a class lives in reference cycles, so without a strong hold every garbage collection
between two messages made the next one build its class again (about 0.7 ms each)."""

from __future__ import annotations

import gc
import weakref

from rota.contracts import envelope, parse, parse_any
from rota.contracts import messages as m
from rota.contracts.envelope import parse_any_reference, parse_reference

from tests.builders import submit_job

MAX = 64 * 1024


def test_the_class_of_a_published_envelope_survives_a_collection() -> None:
    first = envelope(submit_job(), source="cli")
    made = weakref.ref(type(first))
    del first
    gc.collect()
    assert made() is not None
    assert type(envelope(submit_job(), source="cli")) is made()


def test_the_class_of_a_parsed_envelope_survives_a_collection() -> None:
    body = envelope(submit_job(), source="cli").to_bytes()
    for read in (lambda: parse_reference(body, m.SubmitJob, max_bytes=MAX),
                 lambda: parse_any_reference(body, max_bytes=MAX),
                 lambda: parse(body, m.SubmitJob, max_bytes=MAX),
                 lambda: parse_any(body, max_bytes=MAX)):
        made = weakref.ref(type(read()))
        gc.collect()
        assert made() is not None
        assert type(read()) is made()
