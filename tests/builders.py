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


JOB_ID = "0190b5c2-0000-7000-8000-00000000000a"
RUN_ID = "0190b5c2-0000-7000-8000-00000000000b"
PLAN_ID = "0190b5c2-0000-7000-8000-00000000000c"
AT = "2027-01-01T00:00:00Z"
_PLACEMENT = [{"worker": 0, "node": "h100-0", "gpus": [0]}]
VICTIM = {"run_id": RUN_ID, "job_id": JOB_ID, "team": "nlp", "queue": "experiment", "gpus": 8,
           "expected_lost_gpu_seconds": 0.0}

EVENT_DEFAULTS: dict[type[BaseModel], dict[str, Any]] = {
    m.JobSubmitted: {"job_id": JOB_ID, "spec": {**spec_doc(), "submission_id": "s-1"},
                     "submitted_at": AT},
    m.JobCancelled: {"job_id": JOB_ID, "team": "nlp", "reason": "cancelled by user"},
    m.JobRejected: {"code": "UNKNOWN_TEAM", "message": "no team"},
    m.JobPending: {"job_id": JOB_ID, "team": "nlp", "queue": "training", "position": 0,
                   "reasons": [{"code": "QUOTA_EXCEEDED", "message": "16 of 16 used"}],
                   "factors": {}},
    m.AllocationProposed: {"proposal_id": RUN_ID, "job_id": JOB_ID, "run_id": RUN_ID,
                           "team": "nlp", "user": "alice", "queue": "training",
                           "flavor": "h100", "placement": _PLACEMENT, "gpus": 1},
    m.AllocationGranted: {"proposal_id": RUN_ID, "job_id": JOB_ID, "run_id": RUN_ID,
                          "team": "nlp", "flavor": "h100", "placement": _PLACEMENT, "gpus": 1},
    m.AllocationRejected: {"proposal_id": RUN_ID, "job_id": JOB_ID, "run_id": RUN_ID,
                           "code": "GPU_TAKEN", "message": "taken"},
    m.AllocationReleased: {"job_id": JOB_ID, "run_id": RUN_ID, "team": "nlp", "flavor": "h100",
                           "gpus": 1, "gpu_seconds": 0.0},
    m.RunStarted: {"run_id": RUN_ID, "job_id": JOB_ID, "attempt": 1, "placement": _PLACEMENT},
    m.RunCheckpointed: {"run_id": RUN_ID, "job_id": JOB_ID, "checkpoint_uri": "s3://c"},
    m.RunFinished: {"run_id": RUN_ID, "job_id": JOB_ID},
    m.RunFailed: {"run_id": RUN_ID, "job_id": JOB_ID, "error": "boom"},
    m.RunStopped: {"run_id": RUN_ID, "job_id": JOB_ID, "reason": "preempted"},
    m.PreemptionRequested: {"plan_id": PLAN_ID, "preemptor_job_id": PLAN_ID,
                            "preemptor_queue": "production", "victims": [VICTIM],
                            "reason": "rota:lower_tier", "message": "m",
                            "expected_lost_gpu_seconds": 0.0},
    m.PreemptionNoticed: {"plan_id": PLAN_ID, "notice_id": PLAN_ID, "run_id": RUN_ID,
                          "job_id": JOB_ID, "job_name": "train", "team": "nlp", "user": "alice",
                          "queue": "experiment", "deadline": AT, "grace_s": 60.0,
                          "preemptor_job_id": PLAN_ID, "preemptor_queue": "production",
                          "reason": "rota:lower_tier", "resumable": True},
    m.PreemptionCompleted: {"plan_id": PLAN_ID, "preemptor_job_id": PLAN_ID,
                            "victims": [{"run_id": RUN_ID, "job_id": JOB_ID, "outcome": "acked"}]},
    m.UsageRecorded: {"as_of": AT, "half_life_s": 3600.0, "teams": {"nlp": 1.0}},
    m.NodeWithdrawn: {"node": "h100-0", "reason": "NotReady"},
}
"""A valid message of each event class, about one job (`JOB_ID`) and its run (`RUN_ID`)."""


def event(kind: type[M], **fields: Any) -> M:
    """A valid event of class `kind`: `EVENT_DEFAULTS` with `fields` over them, each named as
    the contract names it (`message`)."""
    return message(kind, **{**EVENT_DEFAULTS[kind], **fields})
