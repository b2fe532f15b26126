"""Pure rules of the front door: who may submit what, and how events move a job's row in
the read model."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from rota.config import RotaConfig
from rota.contracts import JobSpec, RackAffinity
from rota.contracts import messages as m
from rota.contracts.job import ANY_FLAVOR, TERMINAL_STATES
from rota.contracts.lifecycle import next_phase, phase_of, public_state, requeues
from rota.contracts.requests import JobStateName
from rota.k8s.manifests import TemplateError, check_template
from rota.k8s.pod_policy import check_pod_policy


@dataclass(frozen=True)
class Rejection:
    code: str
    field: str | None
    message: str


def spec_hash(spec: JobSpec) -> str:
    canonical = json.dumps(spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _gang_slots(gpus_per_node: list[int], gpus_per_worker: int) -> int:
    """How many workers of this shape all those nodes could hold at once."""
    return sum(gpus // gpus_per_worker for gpus in gpus_per_node)


@dataclass
class _Shape:
    """A flavor's nodes as the checks need them, with the gang sizes asked so far: every
    submission is checked, and walking a large cluster's nodes each time was a fifth of the
    service's CPU."""

    gpus: list[int]
    racks: list[list[int]]
    longest_name: int
    _slots: dict[int, int] = field(default_factory=dict)
    _best_rack: dict[int, int] = field(default_factory=dict)

    @property
    def largest(self) -> int:
        return max(self.gpus)

    def slots(self, gpus_per_worker: int) -> int:
        if gpus_per_worker not in self._slots:
            self._slots[gpus_per_worker] = _gang_slots(self.gpus, gpus_per_worker)
        return self._slots[gpus_per_worker]

    def best_rack(self, gpus_per_worker: int) -> int:
        if gpus_per_worker not in self._best_rack:
            self._best_rack[gpus_per_worker] = max(
                _gang_slots(rack, gpus_per_worker) for rack in self.racks)
        return self._best_rack[gpus_per_worker]


_shapes: dict[int, tuple[RotaConfig, dict[str, _Shape]]] = {}
"""id(config) → (config, flavor → shape); the config is kept so its id stays its own."""


def _shape(config: RotaConfig, flavor: str) -> _Shape:
    entry = _shapes.get(id(config))
    if entry is None or entry[0] is not config:
        entry = _shapes[id(config)] = (config, {})
    shapes = entry[1]
    if flavor not in shapes:
        nodes = [n for n in config.expanded_nodes() if n.flavor == flavor]
        racks: dict[str, list[int]] = {}
        for node in nodes:
            racks.setdefault(node.rack, []).append(node.gpus)
        shapes[flavor] = _Shape([n.gpus for n in nodes], list(racks.values()),
                                max(len(n.name) for n in nodes))
    return shapes[flavor]


def check_submission(spec: JobSpec, subject_team: str | None, config: RotaConfig) -> Rejection | None:
    """Authorisation, then semantic checks against `rota.yaml`. None means accepted."""
    if subject_team is not None and subject_team != spec.team:
        return Rejection(
            "UNAUTHORISED", "team",
            f"a producer for team {subject_team!r} may not submit for team {spec.team!r}",
        )
    team = config.teams.get(spec.team)
    if team is None:
        return Rejection("UNKNOWN_TEAM", "team", f"no team {spec.team!r} in the configuration")
    if team.users and spec.user not in team.users:
        return Rejection(
            "UNKNOWN_USER", "user", f"user {spec.user!r} is not a member of team {spec.team!r}"
        )
    if spec.queue not in config.queues:
        return Rejection("UNKNOWN_QUEUE", "queue", f"no queue {spec.queue.value!r} is configured")
    flavors = {f.name for f in config.cluster.flavors}
    if spec.flavor not in flavors:
        return Rejection(
            "UNKNOWN_FLAVOR", "flavor",
            f"no flavor {spec.flavor!r}; known flavors: {', '.join(sorted(flavors))}",
        )
    unknown = [f for f in spec.flavors or () if f != ANY_FLAVOR and f not in flavors]
    if unknown:
        return Rejection(
            "UNKNOWN_FLAVOR", "flavors",
            f"no flavor {unknown[0]!r}; known flavors: {', '.join(sorted(flavors))}, or 'any' last",
        )
    shape = _shape(config, spec.flavor)
    largest = shape.largest
    if spec.gpus_per_worker > largest:
        return Rejection(
            "EXCEEDS_CLUSTER", "gpus_per_worker",
            f"{spec.gpus_per_worker} GPUs per worker, but the largest {spec.flavor} node has"
            f" {largest}",
        )
    slots = shape.slots(spec.gpus_per_worker)
    if spec.min_workers > slots:
        return Rejection(
            "EXCEEDS_CLUSTER", "workers",
            f"{spec.min_workers} workers of {spec.gpus_per_worker} GPUs, but the {spec.flavor} nodes"
            f" can hold at most {slots} such workers",
        )
    if spec.rack is RackAffinity.required:
        best = shape.best_rack(spec.gpus_per_worker)
        if spec.min_workers > best:
            return Rejection(
                "EXCEEDS_CLUSTER", "rack",
                f"rack: required, but no {spec.flavor} rack holds {spec.min_workers} workers of"
                f" {spec.gpus_per_worker} GPUs (at most {best})",
            )
    if spec.topology is not None:
        refused = _topology_rejection(spec, config)
        if refused is not None:
            return refused
    if spec.gpu_share is not None:
        refused = _share_rejection(spec, config)
        if refused is not None:
            return refused
    quota = team.quota.get(spec.flavor, 0)
    borrow = team.borrowing_limit.get(spec.flavor)
    least = spec.min_workers * spec.gpus_per_worker  # an elastic gang may run at its min
    if borrow is not None and least > quota + borrow:
        return Rejection(
            "EXCEEDS_QUOTA_LIMIT", "workers",
            f"{least} {spec.flavor} GPUs, but team {spec.team!r} may hold at most"
            f" {quota + borrow} (quota {quota} + borrowing limit {borrow})",
        )
    if spec.kubernetes is not None:
        # Checked here, against the Kubernetes schema, so that a template the API server
        # would refuse is rejected now rather than after the job waited its turn.
        try:
            check_template(spec)
        except TemplateError as exc:
            return Rejection("INVALID_TEMPLATE", exc.field, exc.message)
        # Then what the team may not do with a valid one: reach the node, the namespace's
        # Secrets, a service-account token (`rota.yaml`'s `kubernetes:` section).
        forbidden = check_pod_policy(spec.kubernetes, spec.team, config.kubernetes)
        if forbidden is not None:
            return Rejection("FORBIDDEN_TEMPLATE", forbidden.field, forbidden.message)
    return None


SPEC_HEADROOM_BYTES = 4096
"""Room that the largest message carrying a job's spec (`StartRun`) needs besides the spec
and the placement: envelope, ids, attempt, run token (up to 256) and `resume_from` (up to
2,048). `JobSubmitted` needs less (about 300)."""


def placement_bytes(workers: int, gpus_per_worker: int, longest_node_name: int) -> int:
    """An upper bound of a placement's JSON: per worker `{"worker":N,"node":"…","gpus":[…]},`
    with 4-digit worker numbers and GPU indices of up to 2 digits (nodes have at most 64)."""
    return workers * (40 + longest_node_name + 3 * gpus_per_worker)


def check_size(spec: JobSpec, config: RotaConfig, max_bytes: int) -> Rejection | None:
    """Accept a spec only if every message that will carry it fits in `max_bytes`: a
    command that fits but whose `StartRun` or `JobSubmitted` would not could never run,
    because every consumer refuses an oversized message. Call after `check_submission`."""
    spec_bytes = len(spec.model_dump_json())
    placement = placement_bytes(spec.workers, spec.gpus_per_worker,
                                _shape(config, spec.flavor).longest_name)
    allowed = max_bytes - SPEC_HEADROOM_BYTES - placement
    if spec_bytes <= allowed:
        return None
    return Rejection(
        "PAYLOAD_TOO_LARGE", None,
        f"the spec is {spec_bytes} bytes as Rota encodes it; the messages that carry it"
        f" (JobSubmitted, and StartRun with {SPEC_HEADROOM_BYTES} bytes of headroom and up to"
        f" {placement} of placement) must fit in {max_bytes}, so the spec may be at most"
        f" {max(allowed, 0)} bytes",
    )


# How each event moves the read model: its phase through `next_phase`, the one lifecycle every
# reader shares, and the columns each event class sets. Terminal states never change again, so
# replays and late, duplicate or out-of-order events cannot resurrect a job.
DRAINED_DETAIL = ("requeued by a drain: its node was drained; it resumes elsewhere from its"
                  " checkpoint (no preemption budget spent)")

Columns = Callable[[Any], dict[str, Any]]
"""The read model's columns an event sets, besides the state."""


def _wait(event: m.JobPending) -> dict[str, Any]:
    return {"wait": event.model_dump(mode="json", include={"reasons", "eta", "position", "factors"})}


def _granted(event: m.AllocationGranted) -> dict[str, Any]:
    # A job that accepts several flavors runs on the one granted.
    granted: dict[str, Any] = {"run_id": event.run_id, "wait": None, "borrowed_gpus": event.borrowed_gpus}
    if event.flavor:  # empty in grants from before flavor lists: the job's own flavor stands
        granted["flavor"] = event.flavor
    return granted


def _released(event: m.AllocationReleased) -> dict[str, Any]:
    return {"borrowed_gpus": 0}


def _started(event: m.RunStarted) -> dict[str, Any]:
    # What it waited for (a refusal, a drain) is over: `rota why` says it runs.
    return {"run_id": event.run_id, "started": True, "detail": None}


def _stopped(event: m.RunStopped) -> dict[str, Any]:
    # lost: its node, or its gang start; resized: it grows, from its checkpoint;
    # drained: its node was drained (a preemption with the reason drain)
    if not requeues(event.reason):
        return {}
    changes: dict[str, Any] = {"run_id": None}
    if event.reason is m.StopReason.drained:
        changes["detail"] = DRAINED_DETAIL
    if event.checkpoint_uri:
        changes["resume_from"] = event.checkpoint_uri
    return changes


def _rejected(event: m.AllocationRejected) -> dict[str, Any]:
    return {"detail": event.message}


def _noticed(event: m.PreemptionNoticed) -> dict[str, Any]:
    if event.reason != "drain":
        return {}
    node = f" {event.node}" if event.node else ""
    return {"detail": f"drain: its node{node} is drained; told to checkpoint and stop (no"
                      " preemption budget spent)"}


def _failed(event: m.RunFailed) -> dict[str, Any]:
    # Why it failed is what `rota why` and `rota jobs` show.
    return {"detail": event.error}


def _nothing(event: BaseModel) -> dict[str, Any]:
    return {}


COLUMNS: dict[type[BaseModel], Columns] = {
    m.JobPending: _wait,
    m.AllocationGranted: _granted,
    m.AllocationReleased: _released,
    m.AllocationRejected: _rejected,
    m.RunStarted: _started,
    m.RunStopped: _stopped,
    m.RunFinished: _nothing,
    m.RunFailed: _failed,
    m.PreemptionNoticed: _noticed,
    m.PreemptionCompleted: _nothing,
    m.JobCancelled: _nothing,
}
"""One handler per event class the read model folds into a job's row."""

STATE_EVENTS: frozenset[type[BaseModel]] = frozenset(COLUMNS)
"""The events `apply_event` can act on; the rest only join the job's history. (A proposal
moves no public state: to its owner a proposed job is still pending.)"""


def related_jobs(event: BaseModel, job_id: str | None) -> list[str]:
    """Every job an event belongs to: its own, and a preemption's victims too, so that a
    victim's history shows the plan that preempted it."""
    jobs = [job_id] if job_id else []
    if isinstance(event, m.PreemptionRequested | m.PreemptionCompleted):
        jobs += [v.job_id for v in event.victims if v.job_id not in jobs]
    return jobs


def apply_event(state: JobStateName, event: BaseModel, job_id: str | None = None
                ) -> tuple[JobStateName, dict[str, Any]]:
    """The job's next state and the columns to update, for one event of job `job_id`."""
    if state in TERMINAL_STATES:
        return state, {}
    columns = COLUMNS.get(type(event))
    if columns is None:
        return state, {}
    phase = phase_of(state)
    # A plan's end moves its victims, never its preemptor.
    if not (isinstance(event, m.PreemptionCompleted) and job_id == event.preemptor_job_id):
        phase = next_phase(phase, event)
    new_state = public_state(phase, cancel_requested=isinstance(event, m.JobCancelled))
    changes = columns(event)
    if new_state in TERMINAL_STATES:
        changes["ended"] = True
    return new_state, changes


def _share_rejection(spec: JobSpec, config: RotaConfig) -> Rejection | None:
    """A GPU share on a flavor (or a named fallback) that does not let shares split its GPUs;
    `any` accepts the shareable flavors only, as the policy reads it."""
    shareable = {f.name for f in config.cluster.flavors if f.shareable}
    for named_in, flavor in [("flavor", spec.flavor),
                             *(("flavors", f) for f in spec.flavors or () if f != ANY_FLAVOR)]:
        if flavor not in shareable:
            return Rejection(
                "FLAVOR_NOT_SHAREABLE", "gpu_share",
                f"gpu_share: {spec.gpu_share}, but flavor {flavor} ({named_in}) does not allow GPU"
                f" shares (set shareable: true on {flavor} in cluster.flavors)",
            )
    return None


def _topology_rejection(spec: JobSpec, config: RotaConfig) -> Rejection | None:
    """A level the cluster does not declare, or a required level no domain of which can ever
    hold the gang on the job's flavor."""
    assert spec.topology is not None
    declared = config.cluster.topology
    known = [*(declared.levels if declared is not None else ["rack"]), "node"]
    for key in ("required", "preferred"):
        level = getattr(spec.topology, key)
        if level is not None and level not in known:
            return Rejection("UNKNOWN_TOPOLOGY_LEVEL", f"topology.{key}",
                             f"no topology level {level!r}; the cluster's levels: {', '.join(known)}")
    level = spec.topology.required
    if level is None:
        return None
    per_domain: dict[str, int] = {}
    for node in config.expanded_nodes():
        if node.flavor == spec.flavor:
            domain = (node.rack if level == "rack" else node.name if level == "node"
                      else node.topology.get(level, node.name))
            per_domain[domain] = per_domain.get(domain, 0) + node.gpus // spec.gpus_per_worker
    best = max(per_domain.values(), default=0)
    if spec.min_workers > best:
        return Rejection(
            "EXCEEDS_CLUSTER", "topology.required",
            f"topology.required: {level}, but no {spec.flavor} {level} holds {spec.min_workers} workers"
            f" of {spec.gpus_per_worker} GPUs (at most {best})",
        )
    return None
