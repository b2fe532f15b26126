"""The job spec: what a researcher asks for, and the executor-specific ways to run it."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StrictBool, StrictFloat, StrictInt, model_validator

from rota.contracts.common import (
    Arg,
    EnvName,
    EnvValue,
    JobName,
    LabelKey,
    LabelValue,
    Name,
    StrictModel,
    SubmissionId,
    Tier,
)

MAX_WORKERS = 1024
MAX_FLAVORS = 16
ANY_FLAVOR = "any"
"""In `JobSpec.flavors`, the last entry that accepts every other flavor of the cluster."""
MAX_GPUS_PER_WORKER = 16
MAX_DECLARED_RUNTIME_S = 90 * 24 * 3600

Env = Annotated[dict[EnvName, EnvValue], Field(max_length=128)]
QUARTERS = 4
SHARES = (0.25, 0.5, 0.75)


def _one_of_shares(value: float) -> float:
    if value not in SHARES:
        raise ValueError("must be 0.25, 0.5 or 0.75 (quarters of one GPU)")
    return value


GpuShare = Annotated[float, AfterValidator(_one_of_shares),
                     Field(json_schema_extra={"enum": list(SHARES)})]
"""A GPU share: this fraction of one GPU (quarters, DECISIONS 66), on a shareable flavor."""


def share_quarters(share: float | None) -> int:
    """A `GpuShare` in quarters of one GPU (the policy's unit); 0 for None (whole GPUs)."""
    return round(share * QUARTERS) if share else 0


def absent(value: object) -> bool:
    """Left out of the JSON when unset, so a spec or placement without a share encodes (and
    hashes, and sizes) exactly as before the field existed."""
    return value is None


def share_fraction(quarters: int) -> float | None:
    """Quarters of one GPU as a `GpuShare`; None for 0 (whole GPUs)."""
    return quarters / QUARTERS if quarters else None


class RackAffinity(StrEnum):
    required = "required"
    preferred = "preferred"
    none = "none"


class TopologyRequest(StrictModel):
    """Which topology level the job's workers must share, and which they would best share
    (Kueue TAS's podset-required-topology / preferred-topology). Levels are the cluster's
    (`cluster.topology.levels` in rota.yaml, e.g. block, rack), or `node`."""

    required: Name | None = Field(None, description="All workers in one domain of this level.")
    preferred: Name | None = Field(
        None, description="Tried first, then each level outward of it (up to `required`).")

    @model_validator(mode="after")
    def _one_level(self) -> TopologyRequest:
        if self.required is None and self.preferred is None:
            raise ValueError("topology: give required, preferred or both")
        return self


class LocalRun(StrictModel):
    """A subprocess on the executor's host, with `CUDA_VISIBLE_DEVICES` set to its GPUs."""

    command: Annotated[list[Arg], Field(min_length=1, max_length=256)]
    env: Env = Field(default_factory=dict)


KubeObject = Annotated[dict[str, Any], Field(max_length=64)]
"""A fragment in Kubernetes' own shape (camelCase keys): checked against the Kubernetes OpenAPI
schema when the job is submitted, not here, so that Rota never lags behind the API."""


class KubernetesRun(StrictModel):
    """A job template for the `kubernetes` executor: one pod per gang worker. GPUs are not
    given here: `nvidia.com/gpu` comes from `gpus_per_worker`, and the node from the grant."""

    image: Annotated[str, Field(min_length=1, max_length=512)]
    command: Annotated[list[Arg], Field(max_length=256)] = Field(default_factory=list)
    args: Annotated[list[Arg], Field(max_length=256)] = Field(default_factory=list)
    env: Env = Field(default_factory=dict)
    resources: KubeObject = Field(
        default_factory=dict, description="A container's ResourceRequirements, beyond GPUs.")
    volumes: Annotated[list[KubeObject], Field(max_length=64)] = Field(default_factory=list)
    volume_mounts: Annotated[list[KubeObject], Field(max_length=64)] = Field(default_factory=list)
    service_account: Name | None = None
    tolerations: Annotated[list[KubeObject], Field(max_length=64)] = Field(default_factory=list)
    pod_template: KubeObject = Field(
        default_factory=dict,
        description="A PodTemplateSpec fragment ({metadata, spec}) merged under what Rota sets.")


class SimRun(StrictModel):
    """How the simulator plays the job: its length, and how it checkpoints."""

    duration_s: StrictFloat = Field(gt=0, le=MAX_DECLARED_RUNTIME_S)
    checkpoint_interval_s: StrictFloat | None = Field(None, gt=0, le=MAX_DECLARED_RUNTIME_S)
    checkpoint_save_s: StrictFloat = Field(60.0, ge=0, le=3600)
    fail_after_s: StrictFloat | None = Field(None, gt=0, description="Fail at this run time (tests).")


class JobSpec(StrictModel):
    name: JobName
    team: Name
    user: Name
    queue: Tier
    flavor: Name
    flavors: Annotated[list[Name], Field(min_length=1, max_length=MAX_FLAVORS)] | None = Field(
        None,
        description="Every flavor the job accepts, in order of preference, `flavor` first; `any`"
        " as the last entry accepts every other flavor of the cluster, in the order rota.yaml"
        " lists them. Absent: `flavor` only.",
    )
    workers: StrictInt = Field(1, ge=1, le=MAX_WORKERS)
    workers_min: StrictInt | None = Field(
        None,
        ge=1,
        le=MAX_WORKERS,
        description="An elastic gang: the fewest workers it may run with, `workers` the most; it"
        " starts at the largest size that fits, and may be shrunk towards this or grown back."
        " `workers: {min: 2, max: 8}` on submission is the same as `workers: 8, workers_min: 2`."
        " Absent: a rigid gang of `workers`.",
    )
    gpus_per_worker: StrictInt = Field(1, ge=1, le=MAX_GPUS_PER_WORKER)
    gpu_share: GpuShare | None = Field(
        None, exclude_if=absent,
        description="This fraction of one GPU (0.25, 0.5 or 0.75), shared with other jobs, on a"
        " flavor with `shareable: true`; only with workers 1 and gpus_per_worker 1. Absent: whole"
        " GPUs.",
    )
    resumable: StrictBool = False
    declared_runtime_s: StrictInt | None = Field(None, ge=1, le=MAX_DECLARED_RUNTIME_S)
    rack: RackAffinity = RackAffinity.none
    topology: TopologyRequest | None = Field(
        None,
        description="Topology levels its workers must or would best share; replaces `rack`"
        " (`rack: required` is `topology: {required: rack}`). Absent: `rack` says.",
    )
    labels: Annotated[dict[LabelKey, LabelValue], Field(max_length=32)] = Field(
        default_factory=dict
    )
    submission_id: SubmissionId = Field(description="Idempotency key: resubmits return one job.")
    local: LocalRun | None = None
    kubernetes: KubernetesRun | None = None
    sim: SimRun | None = None

    @property
    def total_gpus(self) -> int:
        """GPUs at its largest size (`workers`)."""
        return self.workers * self.gpus_per_worker

    @property
    def min_workers(self) -> int:
        """The fewest workers it runs with: `workers_min`, or `workers` for a rigid gang."""
        return self.workers if self.workers_min is None else self.workers_min

    @model_validator(mode="before")
    @classmethod
    def _worker_range(cls, data: Any) -> Any:
        """`workers: {min, max}` is `workers: max, workers_min: min` (DECISIONS 70)."""
        if not isinstance(data, dict) or not isinstance(data.get("workers"), dict):
            return data
        given = data["workers"]
        unknown = sorted(set(given) - {"min", "max"})
        if unknown or "min" not in given or "max" not in given:
            raise ValueError("workers: an elastic range is {min: N, max: M}, both given, nothing else")
        if "workers_min" in data:
            raise ValueError("workers_min: give it or workers: {min, max}, not both")
        for key in ("min", "max"):
            value = given[key]
            if type(value) is not int:
                raise ValueError(f"workers.{key}: must be a whole number")
            if not 1 <= value <= MAX_WORKERS:
                raise ValueError(f"workers.{key}: must be between 1 and {MAX_WORKERS}")
        return {**data, "workers": given["max"], "workers_min": given["min"]}

    @model_validator(mode="after")
    def _min_at_most_max(self) -> JobSpec:
        if self.workers_min is not None and self.workers_min > self.workers:
            raise ValueError(
                f"workers: min {self.workers_min} is above max {self.workers}")
        return self

    @model_validator(mode="after")
    def _topology_or_rack(self) -> JobSpec:
        if self.topology is not None and self.rack is not RackAffinity.none:
            raise ValueError("topology: replaces rack; give one of them")
        return self

    @model_validator(mode="after")
    def _flavors_start_with_flavor(self) -> JobSpec:
        flavors = self.flavors
        if flavors is None:
            return self
        if flavors[0] != self.flavor:
            raise ValueError(f"flavors: must start with flavor {self.flavor!r}, the preferred one")
        if len(set(flavors)) != len(flavors):
            raise ValueError("flavors: names a flavor twice")
        if ANY_FLAVOR in flavors[:-1] or self.flavor == ANY_FLAVOR:
            raise ValueError(f"flavors: {ANY_FLAVOR!r} may only be the last entry, after `flavor`")
        return self

    def fallback_flavors(self, cluster: tuple[str, ...]) -> tuple[str, ...]:
        """The flavors the job accepts after `flavor`, `any` expanded over `cluster`."""
        if not self.flavors:
            return ()
        named = tuple(f for f in self.flavors[1:] if f != ANY_FLAVOR)
        if self.flavors[-1] == ANY_FLAVOR:
            named += tuple(f for f in cluster if f != self.flavor and f not in named)
        return named

    @model_validator(mode="after")
    def _share_of_one_gpu(self) -> JobSpec:
        if self.gpu_share is not None and (self.workers != 1 or self.gpus_per_worker != 1):
            raise ValueError("gpu_share: needs workers 1 and gpus_per_worker 1 (a share of one GPU)")
        return self

    @property
    def share(self) -> int:
        """Its GPU share in quarters of one GPU; 0: whole GPUs."""
        return share_quarters(self.gpu_share)

    @model_validator(mode="after")
    def _checkpointing_needs_resumable(self) -> JobSpec:
        if self.sim and self.sim.checkpoint_interval_s and not self.resumable:
            raise ValueError("sim.checkpoint_interval_s: needs resumable: true")
        return self


class WorkerPlacement(StrictModel):
    """One gang member: a node and the GPU indices on it."""

    worker: StrictInt = Field(ge=0, lt=MAX_WORKERS)
    node: Name
    gpus: Annotated[list[StrictInt], Field(min_length=1, max_length=MAX_GPUS_PER_WORKER)]
    gpu_share: GpuShare | None = Field(
        None, exclude_if=absent,
        description="The fraction of its one GPU this worker holds (a GPU share); absent: it"
        " holds its GPUs whole.")

    @model_validator(mode="after")
    def _share_of_one_gpu(self) -> WorkerPlacement:
        if self.gpu_share is not None and len(self.gpus) != 1:
            raise ValueError("gpu_share: a share holds part of exactly one GPU")
        return self


Placement = Annotated[list[WorkerPlacement], Field(min_length=1, max_length=MAX_WORKERS)]

TERMINAL_STATES: frozenset[str] = frozenset({"finished", "failed", "cancelled"})
