"""The preemption and resize messages: a plan's victims, the notice to a run and its
acknowledgement, the saga's end, and an elastic run's grow (DECISIONS 81, 82, 84). Named in
`rota.contracts.messages` too, which is where every reader takes them from.

Within version 1, changes are additive only: new optional fields, new message types.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StrictBool, StrictFloat, StrictInt

from rota.contracts.common import (
    GpuCount,
    JobName,
    Name,
    OpenModel,
    ShortText,
    StrictModel,
    Tier,
    Timestamp,
    Uri,
    Uuid,
)
from rota.contracts.job import MAX_WORKERS, GpuShare, Placement, absent

__all__ = [
    "GrowCompleted",
    "GrowRequested",
    "PreemptionCompleted",
    "PreemptionNotice",
    "PreemptionNoticed",
    "PreemptionRequested",
    "ReportCheckpoint",
    "RunToken",
    "Victim",
    "VictimOutcome",
    "VictimResult",
]

RunToken = Annotated[str, Field(min_length=16, max_length=256)]


class Victim(OpenModel):
    run_id: Uuid
    job_id: Uuid
    team: Name
    queue: Tier
    gpus: GpuCount
    expected_lost_gpu_seconds: StrictFloat = Field(ge=0)
    borrowed: StrictBool = False
    job_name: JobName | None = None
    user: Name | None = None
    resumable: StrictBool = False
    last_checkpoint_uri: Uri | None = None
    shrink_to: StrictInt | None = Field(
        None, ge=1, le=MAX_WORKERS, exclude_if=absent,
        description="An elastic run shrunk instead of stopped: the workers it keeps (its first"
        " ones), with which it restarts on their GPUs after its checkpoint; `gpus` are the"
        " dropped workers'. Absent: the run stops.",
    )
    gpu_share: GpuShare | None = Field(
        None, exclude_if=absent,
        description="A GPU share stopped (DECISIONS 84): the fraction of its one GPU it frees, with"
        " `gpus` 0. Absent: it holds `gpus` whole GPUs.")


class PreemptionRequested(OpenModel):
    plan_id: Uuid
    preemptor_job_id: Uuid
    preemptor_queue: Tier
    preemptor_team: Name | None = None
    target: Placement | None = Field(
        None, description="Where the preemptor goes once the victims stop; held for it."
    )
    victims: Annotated[list[Victim], Field(min_length=1)]
    reason: str
    message: ShortText
    expected_lost_gpu_seconds: StrictFloat = Field(ge=0)
    node: Name | None = Field(
        None, exclude_if=absent,
        description="A drain's plan (reason `drain`): the node drained. Its preemptor_job_id is"
        " the drain's own id, no job's, its preemptor_queue the victim's; no GPU is held for"
        " it, and its victims stop `drained`, spending no preemption budget. Absent: a"
        " preemption for a job.")


class PreemptionNoticed(OpenModel):
    """For humans: a victim has been told to checkpoint and stop by `deadline`."""

    plan_id: Uuid
    notice_id: Uuid
    run_id: Uuid
    job_id: Uuid
    job_name: JobName
    team: Name
    user: Name
    queue: Tier
    deadline: Timestamp
    grace_s: StrictFloat = Field(ge=0)
    preemptor_job_id: Uuid
    preemptor_queue: Tier
    reason: str
    resumable: StrictBool
    resume_from: Uri | None = None
    shrink_to: StrictInt | None = Field(
        None, ge=1, le=MAX_WORKERS, exclude_if=absent,
        description="A shrink: the run restarts with this many workers on GPUs it keeps."
        " Absent: it stops and waits in its queue.",
    )
    node: Name | None = Field(
        None, exclude_if=absent, description="A drain's notice: the node drained.")


class VictimOutcome(StrEnum):
    acked = "acked"
    forced = "forced"
    finished = "finished"
    aborted = "aborted"
    shrunk = "shrunk"
    """An elastic victim acknowledged its notice and restarts smaller on GPUs it kept."""
    grown = "grown"
    """A growing run (`GrowRequested`, no victim of anyone's) saved and restarts larger."""


class GrowRequested(OpenModel):
    """An elastic run below its max grows on idle GPUs (DECISIONS 74, 82): told to save a
    checkpoint, it stops and restarts with `workers` workers on `target`, its own GPUs and the
    added ones, which the scheduler holds for it meanwhile. Not a preemption: no budget, no
    preemption metrics, and a run that does not save in time keeps running as it was."""

    grow_id: Uuid
    job_id: Uuid
    run_id: Uuid
    team: Name
    queue: Tier
    job_name: JobName | None = None
    user: Name | None = None
    workers: StrictInt = Field(ge=2, le=MAX_WORKERS)
    added_gpus: GpuCount
    target: Placement
    message: ShortText


class GrowCompleted(OpenModel):
    """A grow's saga ended: `grown` (it saved and stopped, and restarts larger), `aborted` (no
    checkpoint in time, or the job was cancelled: it keeps running as it was) or `finished`
    (its run ended first)."""

    grow_id: Uuid
    job_id: Uuid
    run_id: Uuid
    outcome: VictimOutcome
    checkpoint_uri: Uri | None = None


class VictimResult(OpenModel):
    run_id: Uuid
    job_id: Uuid
    outcome: VictimOutcome
    checkpoint_uri: Uri | None = None
    lost_gpu_seconds: StrictFloat = Field(0.0, ge=0)


class PreemptionCompleted(OpenModel):
    plan_id: Uuid
    preemptor_job_id: Uuid
    aborted: StrictBool = False
    victims: list[VictimResult]


class ReportCheckpoint(StrictModel):
    """From a run to the executor, as a request on `rota.run.checkpoint.<run_id>`: a checkpoint
    is saved; with `notice_id`, it acknowledges that notice. The reply is an `ApiReply`, sent
    once the report is recorded. The run token never goes onto a stream."""

    run_id: Uuid
    job_id: Uuid
    checkpoint_uri: Uri
    run_token: RunToken
    notice_id: Uuid | None = Field(None, description="The PreemptionNotice this answers.")
    progress_s: StrictFloat | None = Field(None, ge=0)


class PreemptionNotice(OpenModel):
    """On `rota.ctl.run.<run_id>`: save a checkpoint, then acknowledge before `deadline`."""

    notice_id: Uuid
    plan_id: Uuid
    run_id: Uuid
    job_id: Uuid
    action: Literal["checkpoint_and_stop", "withdrawn"] = "checkpoint_and_stop"
    deadline: Timestamp
    grace_s: StrictFloat = Field(ge=0)
    ack_subject: str
    reason: ShortText
    shrink_to: StrictInt | None = Field(
        None, ge=1, le=MAX_WORKERS, exclude_if=absent,
        description="A shrink: after the stop, the job restarts from this checkpoint with this"
        " many workers. Absent: it waits in its queue.",
    )
    grow_to: StrictInt | None = Field(
        None, ge=2, le=MAX_WORKERS, exclude_if=absent,
        description="A grow, not a preemption (`plan_id` is the grow's id): after the stop, the"
        " job restarts from this checkpoint with this many workers. Without an ack by"
        " `deadline` the notice is withdrawn and the run goes on as it was.",
    )
