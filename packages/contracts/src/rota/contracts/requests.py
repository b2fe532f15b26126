"""The read API: requests (strict) and the reply every request gets, errors included."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StrictBool, StrictInt, StringConstraints

from rota.contracts.common import Name, OpenModel, ShortText, StrictModel, SubmissionId, Tier, Uuid

JobStateName = Literal[
    "pending", "admitted", "running", "preempting", "finished", "failed", "cancelled"
]


SearchText = Annotated[str, StringConstraints(min_length=1, max_length=128,
                                              pattern=r"^[A-Za-z0-9._:/-]+$")]
"""What a job's name or id may contain: letters, digits and `._:/-`."""


class ApiError(OpenModel):
    code: str
    field: str | None = None
    message: ShortText


class ApiReply(OpenModel):
    """Every request's reply, as an envelope's `data`: `ok` with `result`, or an `error`."""

    ok: StrictBool
    result: Any = None
    error: ApiError | None = None
    command_id: Uuid | None = Field(None, description="The envelope `id` of the request this "
                                    "answers; null when it could not be read.")
    submission_id: SubmissionId | None = Field(
        None, description="For a submit: the request's `data.submission_id`, when valid.")


class GetJob(StrictModel):
    """`rota.api.job.get`, `.why`, `.trace`: one job by its id, its short id (the id's last 12
    characters, as `rota jobs` prints it), or any 8+ characters from the id's start or end
    that only one job has (else `AMBIGUOUS_ID`)."""

    job_id: Annotated[str, Field(min_length=8, max_length=36, pattern=r"^[0-9a-f-]+$")]


class ListJobs(StrictModel):
    """`rota.api.jobs.list`: newest first."""

    team: Name | None = None
    queue: Tier | None = None
    state: JobStateName | None = None
    limit: StrictInt = Field(100, ge=1, le=10_000)
    user: Name | None = Field(None, description="Only this user's jobs (`squeue -u`).")
    name: Name | None = Field(None, description="Only the jobs of this name (`squeue -n`).")
    search: SearchText | None = Field(
        None, description="Only the jobs whose name contains this text (any case), or whose id "
        "starts or ends with it (a short id is the id's last 12 characters).")
    offset: StrictInt = Field(0, ge=0, le=1_000_000, description="Skip this many of the jobs "
                              "that match, newest first: the next page starts at offset + limit.")


class ListAllocations(StrictModel):
    """`rota.sys.ledger.allocations`: the ledger's allocations, one entry per run.

    Active ones (the default) oldest grant first, for the scheduler's rebuild on start;
    with `active_only: false`, released ones too, newest first.
    """

    active_only: StrictBool = True
    limit: StrictInt = Field(10_000, ge=1, le=100_000)
    job_id: Uuid | None = None


class ListNotifications(StrictModel):
    """`rota.sys.notifier.list`: notifications sent, retrying or dead, newest first."""

    failed: StrictBool = Field(False, description="Only the dead letter.")
    limit: StrictInt = Field(50, ge=1, le=1000)
    job_id: Uuid | None = None
    with_channels: StrictBool = Field(
        False, description="Answer `{channels, notifications}`: the channels the notifier is "
        "configured with (none: nothing is recorded, nor sent), then the list.")


class ListPreemptions(StrictModel):
    """`rota.sys.preemption.plans`: preemption sagas with their victims, newest first."""

    plan_id: Uuid | None = None
    job_id: Uuid | None = Field(None, description="Plans with this job as preemptor or victim.")
    open: StrictBool = Field(False, description="Only plans still in progress.")
    limit: StrictInt = Field(50, ge=1, le=1000)


class ListDeadLetters(StrictModel):
    """`rota.sys.deadletter.<service>`: messages that service gave up on, newest first."""

    limit: StrictInt = Field(50, ge=1, le=1000)


class SummarizeQueues(StrictModel):
    """`rota.api.queues.summary`: jobs and GPUs per queue, team and state."""

    team: Name | None = None


class SubmitReply(OpenModel):
    job_id: Uuid
    duplicate: StrictBool
    state: str
    submission_id: SubmissionId
