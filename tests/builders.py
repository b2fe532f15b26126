"""Small builders for job specs and commands, shared by the tests."""

from __future__ import annotations

import uuid
from typing import Any

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
