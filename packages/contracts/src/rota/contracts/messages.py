"""Every command and event payload. Commands are imperative and strict; events are past tense.
The read API's requests and replies are in `rota.contracts.requests`, and the preemption and
resize messages in `rota.contracts.preemption`; both are named here too.

Within version 1, changes are additive only: new optional fields, new message types.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, StrictBool, StrictFloat, StrictInt

from rota.contracts.common import (
    GpuCount,
    Name,
    OpenModel,
    ShortText,
    StrictModel,
    SubmissionId,
    Tier,
    Timestamp,
    Uri,
    Uuid,
)
from rota.contracts.job import JobSpec, Placement
from rota.contracts.preemption import (
    GrowCompleted,
    GrowRequested,
    PreemptionCompleted,
    PreemptionNotice,
    PreemptionNoticed,
    PreemptionRequested,
    ReportCheckpoint,
    RunToken,
    Victim,
    VictimOutcome,
    VictimResult,
)
from rota.contracts.requests import (
    ApiError,
    ApiReply,
    GetJob,
    JobStateName,
    ListAllocations,
    ListDeadLetters,
    ListJobs,
    ListNotifications,
    ListPreemptions,
    SubmitReply,
    SummarizeQueues,
)

__all__ = [
    "ApiError",
    "ApiReply",
    "GetJob",
    "GrowCompleted",
    "GrowRequested",
    "JobStateName",
    "ListAllocations",
    "ListDeadLetters",
    "ListJobs",
    "ListNotifications",
    "ListPreemptions",
    "PreemptionCompleted",
    "PreemptionNotice",
    "PreemptionNoticed",
    "PreemptionRequested",
    "ReportCheckpoint",
    "RunToken",
    "SubmitReply",
    "SummarizeQueues",
    "Victim",
    "VictimOutcome",
    "VictimResult",
]
INT32_MAX = 2**31 - 1
"""Integers stored in PostgreSQL `integer` columns stay within its range."""

# ---------------------------------------------------------------- commands


class SubmitJob(JobSpec):
    """Submit one job. Published on `rota.cmd.submit.<team>`; the team must match `team`."""


class CancelJob(StrictModel):
    """Cancel a job, pending or running. Published on `rota.cmd.cancel.<team>`."""

    job_id: Uuid
    team: Name
    reason: ShortText = "cancelled by user"


class StartRun(StrictModel):
    """Start one run of a job on granted GPUs. Sent to the executor."""

    run_id: Uuid
    job_id: Uuid
    attempt: StrictInt = Field(ge=1, le=10_000)
    spec: JobSpec
    placement: Placement
    resume_from: Uri | None = None


class StopReason(StrEnum):
    preempted = "preempted"
    cancelled = "cancelled"
    deadline = "deadline"
    lost = "lost"
    """The backend lost the run (its node went away, or its gang never started): it goes back
    to its queue and resumes from its last checkpoint, like a preempted run."""
    resized = "resized"
    """An elastic run stopped after its checkpoint to restart at once at another size on GPUs
    held for it (a grow, DECISIONS 82): back to its queue like a preempted run, but no
    preemption."""
    drained = "drained"
    """Stopped because its node is drained (`NodeDrainRequested`): preempted with the reason
    `drain`, after a notice and its checkpoint acknowledgement (or forced at the grace's end);
    back to its queue like a preempted run, but spending none of the job's preemption budget."""


class StopRun(StrictModel):
    """Stop a run now. `forced` means no checkpoint acknowledgement arrived in time."""

    run_id: Uuid
    job_id: Uuid
    reason: StopReason
    forced: StrictBool = False
    plan_id: Uuid | None = None


# ---------------------------------------------------------------- job events


COMMAND_ID = Field(None, description="The envelope `id` of the command this answers; null "
                   "when it could not be read (or for an event from before it was carried).")


class JobSubmitted(OpenModel):
    """A job is recorded: the answer to its first `SubmitJob`."""

    job_id: Uuid
    spec: JobSpec
    submitted_at: Timestamp
    command_id: Uuid | None = COMMAND_ID
    submission_id: SubmissionId | None = Field(None, description="`spec.submission_id` again.")


class JobResubmitted(OpenModel):
    """A `SubmitJob` whose `submission_id` already names a job with the same spec: nothing new
    is created, and this is its answer, on either path. `duplicate` is always true."""

    job_id: Uuid
    team: Name
    submission_id: SubmissionId
    command_id: Uuid | None = COMMAND_ID
    state: JobStateName
    duplicate: StrictBool = True
    subject: str | None = None


class JobRejected(OpenModel):
    """A submission or cancellation refused. `field` names the offending field or rule."""

    code: str
    field: str | None = None
    message: ShortText
    submission_id: SubmissionId | None = Field(
        None, description="The command's `data.submission_id`, whenever it was a valid one.")
    job_id: Uuid | None = None
    team: str | None = None
    subject: str | None = None
    command_id: Uuid | None = COMMAND_ID


class JobCancelled(OpenModel):
    job_id: Uuid
    team: Name
    reason: ShortText
    was_running: StrictBool = False
    command_id: Uuid | None = COMMAND_ID


class WaitReasonCode(StrEnum):
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    INSUFFICIENT_CAPACITY = "INSUFFICIENT_CAPACITY"
    NO_MATCHING_FLAVOR = "NO_MATCHING_FLAVOR"
    PRIORITY = "PRIORITY"
    FRAGMENTATION = "FRAGMENTATION"
    EXCEEDS_CLUSTER = "EXCEEDS_CLUSTER"
    WAITING_FOR_PREEMPTION = "WAITING_FOR_PREEMPTION"
    RESERVED_FOR_HIGHER_PRIORITY = "RESERVED_FOR_HIGHER_PRIORITY"
    PREEMPTION_DELAYED = "PREEMPTION_DELAYED"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"
    PREEMPTION_HELD = "PREEMPTION_HELD"
    """A rule holds the job back from preempting: its victims' minimum runtime or preemption
    budget, or its queue's wait target (`details.hold` says which, `details.hold_ends_at` until
    when, where it ends)."""
    NO_EXECUTOR = "NO_EXECUTOR"
    """No running executor can run the job as it is (it has no section for their backends,
    `ExecutorAnnounced`): it waits, and is not admitted, until one that can announces itself
    (`details.executors`: the backends running, `details.sections`: the job's)."""


class WaitReason(OpenModel):
    code: WaitReasonCode
    message: ShortText
    details: dict[str, Any] = Field(default_factory=dict)


class ScoreFactors(OpenModel):
    """The breakdown of a pending job's order within its tier; `total` is their sum."""

    queue: StrictFloat = 0.0
    age: StrictFloat = 0.0
    fairshare: StrictFloat = 0.0
    quota_headroom: StrictFloat = 0.0
    total: StrictFloat = 0.0


class JobPending(OpenModel):
    """Why a job waits, primary reason first, and when it is expected to start."""

    job_id: Uuid
    team: Name
    queue: Tier
    reasons: Annotated[list[WaitReason], Field(min_length=1)]
    eta: Timestamp | None = None
    position: StrictInt = Field(ge=0, le=INT32_MAX)
    factors: ScoreFactors


# ---------------------------------------------------------------- allocation events


class AllocationProposed(OpenModel):
    proposal_id: Uuid
    job_id: Uuid
    run_id: Uuid
    team: Name
    user: Name
    queue: Tier
    flavor: Name
    placement: Placement
    gpus: GpuCount
    borrowed_gpus: GpuCount = 0
    plan_id: Uuid | None = None


class AllocationGranted(OpenModel):
    proposal_id: Uuid
    job_id: Uuid
    run_id: Uuid
    team: Name
    flavor: Name
    placement: Placement
    gpus: GpuCount
    borrowed_gpus: GpuCount = 0


class AllocationRejected(OpenModel):
    proposal_id: Uuid
    job_id: Uuid
    run_id: Uuid
    code: str
    message: ShortText


class AllocationReleased(OpenModel):
    job_id: Uuid
    run_id: Uuid
    team: Name
    flavor: Name
    gpus: GpuCount
    gpu_seconds: StrictFloat = Field(ge=0)


# ---------------------------------------------------------------- run events


class RunStarted(OpenModel):
    run_id: Uuid
    job_id: Uuid
    attempt: StrictInt = Field(ge=1, le=10_000)
    placement: Placement
    resumed_from: Uri | None = None


class RunCheckpointed(OpenModel):
    """A checkpoint is saved. When answering a notice, this is the acknowledgement.

    Published by the executor only: for a job's own `ReportCheckpoint` once its run token is
    verified, or for a checkpoint the simulator made. It never carries the token."""

    run_id: Uuid
    job_id: Uuid
    checkpoint_uri: Uri
    notice_id: Uuid | None = Field(None, description="The PreemptionNotice this answers.")
    progress_s: StrictFloat | None = Field(None, ge=0)


class RunFinished(OpenModel):
    run_id: Uuid
    job_id: Uuid
    exit_code: StrictInt = Field(0, ge=-INT32_MAX - 1, le=INT32_MAX)


class RunFailed(OpenModel):
    run_id: Uuid
    job_id: Uuid
    exit_code: StrictInt | None = Field(None, ge=-INT32_MAX - 1, le=INT32_MAX)
    error: ShortText


class RunStopped(OpenModel):
    run_id: Uuid
    job_id: Uuid
    reason: StopReason
    forced: StrictBool = False
    checkpoint_uri: Uri | None = None
    lost_gpu_seconds: StrictFloat = Field(0.0, ge=0)


class NodeWithdrawn(OpenModel):
    """A node the executor's cluster can no longer run work on (NotReady, cordoned, deleted):
    the scheduler places nothing on it until `NodeRestored`. Its runs end on their own,
    `RunStopped(lost)`, and requeue from their last checkpoint."""

    node: Name
    reason: Annotated[str, Field(min_length=1, max_length=256)]


class NodeRestored(OpenModel):
    """A withdrawn node is usable again: it is offered for placement once more."""

    node: Name


class ExecutorAnnounced(OpenModel):
    """An executor (one replica) runs, and says which jobs it can run: at its start and then
    every `valid_for_s / 3` seconds. The scheduler admits no job that no executor announced as
    running can run (wait reason `NO_EXECUTOR`); an announcement not renewed within
    `valid_for_s` of `occurred_at` means that replica has gone. A later announcement of the
    same `replica` replaces the earlier one (a restart, perhaps with another backend)."""

    backend: Name = Field(description="`sim`, `local` or `kubernetes`.")
    needs: Name | None = Field(None, description=(
        "The job spec section this executor needs to run a job: `local` (a command) or "
        "`kubernetes` (an image); none: it runs every job (the simulator plays a job without a "
        "`sim` section for its declared runtime)."))
    instance: Uuid = Field(description="This process: a new id at each start.")
    replica: StrictInt = Field(0, ge=0, le=63)
    replicas: StrictInt = Field(1, ge=1, le=64)
    valid_for_s: StrictFloat = Field(gt=0, le=86_400)


class NodeDrainRequested(OpenModel):
    """A node is drained (an admin's `rota cluster drain`, or a Kubernetes cordon): it gets no
    new placement from now on. A run on it expected to end before `deadline` (by its scaled
    runtime) is left to finish; any other, and at `deadline` whatever still runs there, is
    preempted with the reason `drain` (notice, checkpoint acknowledgement, stop, requeue), which
    spends no preemption budget. Draining a node already draining replaces its deadline and
    reason."""

    node: Name
    deadline: Timestamp
    reason: Annotated[str, Field(min_length=1, max_length=256)]
    requested_by: Annotated[str, Field(min_length=1, max_length=128)] = Field(
        "admin", description="Who asked: `admin` (the API) or `kubernetes` (a cordon).")


class NodeDrainCancelled(OpenModel):
    """A drain is over (`rota cluster undrain`, or an uncordon): the node takes placements
    again. Runs already stopped for the drain stay requeued; notices not yet acknowledged are
    not withdrawn (their sagas end as usual)."""

    node: Name
    requested_by: Annotated[str, Field(min_length=1, max_length=128)] = "admin"


class RunEvictionRequested(OpenModel):
    """A Kubernetes EvictionRequest (lifecycle.k8s.io/v1alpha1) names a pod of this run: the
    run is stopped as a drain of the pod's node would stop it (notice, checkpoint
    acknowledgement, stop `drained`, requeue), at once, but the node stays open. `withdrawn`:
    every requester withdrew (or deleted its request); a stop not yet ordered is not."""

    run_id: Uuid
    job_id: Uuid
    node: Name
    pod: Annotated[str, Field(min_length=1, max_length=253)]
    requester: Annotated[str, Field(min_length=1, max_length=317)]
    withdrawn: StrictBool = False


class DrainNode(StrictModel):
    """`rota.api.node.drain` (admin only): drain `node` by `deadline` (default: now plus
    `deadline_s`, default one hour)."""

    node: Name
    deadline: Timestamp | None = None
    deadline_s: StrictFloat | None = Field(None, ge=0, le=30 * 24 * 3600)
    reason: Annotated[str, Field(min_length=1, max_length=256)] = "maintenance"


class UndrainNode(StrictModel):
    """`rota.api.node.undrain` (admin only): end `node`'s drain."""

    node: Name


class ListNodes(StrictModel):
    """`rota.sys.scheduler.nodes`: every node of rota.yaml with its state and the runs on it,
    answered by the active scheduler."""

    node: Name | None = None


class UsageRecorded(OpenModel):
    """The ledger's decayed usage (GPU-seconds, half-life from config), for fair share."""

    as_of: Timestamp
    half_life_s: StrictFloat = Field(gt=0)
    teams: dict[str, StrictFloat]
    users: dict[str, StrictFloat] = Field(default_factory=dict, description="Keyed `team/user`.")


class BudgetUse(OpenModel):
    """One team's use of one flavor against its GPU-hour budget, in the current period."""

    team: Name
    flavor: Name
    period: Annotated[str, Field(min_length=1, max_length=16)]
    """day, week, month, quarter or year: a UTC calendar period."""
    period_start: Timestamp
    resets_at: Timestamp
    used_gpu_hours: StrictFloat = Field(ge=0)
    budget_gpu_hours: StrictFloat = Field(gt=0)
    when_exhausted: Annotated[str, Field(min_length=1, max_length=16)]
    """wait or idle_only (config `teams.<team>.budgets.<flavor>.when_exhausted`)."""


class BudgetUsageRecorded(OpenModel):
    """The scheduler's count of GPU-hours used against each budget this period (running runs
    up to `as_of`). Published when a team crosses 80% or 100% of a budget, when a period
    resets, and otherwise at most every few minutes; the notifier warns at 80%."""

    as_of: Timestamp
    budgets: list[BudgetUse] = Field(default_factory=list, max_length=10_000)
