"""Small builders for job specs and commands, shared by the tests."""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

from pydantic import BaseModel
from rota.contracts import messages as m


def spec_doc(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "train-llm", "team": "nlp", "user": "alice", "queue": "training",
        "flavor": "h100", "workers": 1, "gpus_per_worker": 8, "resumable": True,
        "submission_id": f"sub-{uuid.uuid4().hex}",
    }
    doc.update(overrides)
    return doc


def submit_job(**overrides: Any) -> m.SubmitJob:
    return m.SubmitJob.model_validate(spec_doc(**overrides))


M = TypeVar("M", bound=BaseModel)


def message(kind: type[M], **fields: Any) -> M:
    """A contract message built from its fields, by name: a field the message does not have is
    an error here (events ignore unknown fields on the wire), so a field renamed in a contract
    fails the tests that build it."""
    unknown = sorted(set(fields) - set(kind.model_fields))
    if unknown:
        raise TypeError(f"{kind.__name__} has no field {', '.join(unknown)}")
    return kind.model_validate(fields)
