"""How a run stands, read from its pods, with no I/O: the `kubernetes` backend's rules.

- A gang has started only when every one of its pods is Running (or already done).
- One pod failed: the run failed, with that pod's exit code and reason (OOMKilled, Evicted).
- Every pod succeeded: the run finished.
- A pod that cannot start (unschedulable, an image that cannot be pulled, its node lost)
  is only named here; the backend decides when waiting has lasted too long.
- A pod the cluster's admission refused never exists: the Job controller says why in a
  `FailedCreate` Event on the Job. A refusal (PodSecurity, a ResourceQuota, a LimitRange, a
  missing ServiceAccount, a webhook's denial) fails the run; an admission webhook that could
  not be called is the cluster's trouble, waited out like any pod that cannot start.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from rota.contracts.job import WorkerPlacement
from rota.k8s.manifests import INDEX_ANNOTATION, PLACEMENT_GATE, node_name_term

from rota_executor.backend import Exit

Pod = dict[str, Any]


def index_of(pod: Pod) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(INDEX_ANNOTATION)
    return int(value) if value is not None and value.isdigit() else None


def gated(pod: Pod) -> bool:
    return any(g.get("name") == PLACEMENT_GATE for g in pod["spec"].get("schedulingGates") or [])


def pin_patch(pod: Pod, placement: list[WorkerPlacement]) -> dict[str, Any] | None:
    """The merge patch that pins a gated pod to its worker's granted node and lifts Rota's gate,
    or None when the pod is not ours to pin (no gate, or an index the grant does not have)."""
    index = index_of(pod)
    node = next((w.node for w in placement if w.worker == index), None)
    if not gated(pod) or node is None:
        return None
    affinity = copy.deepcopy(pod["spec"].get("affinity") or {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    terms = (node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms") or []
    # By the node's name: its hostname label may differ from it.
    if not terms:  # nothing required yet: the API lets a gated pod have any
        terms = [{"matchFields": [node_name_term(node)]}]
    else:
        # Only additions to each term's requirements: the API lets a gated pod narrow, not
        # widen. An empty term matches no node already, and the API forbids adding to it.
        for term in terms:
            if term.get("matchExpressions") or term.get("matchFields"):
                term.setdefault("matchFields", []).append(node_name_term(node))
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {"nodeSelectorTerms": terms}
    gates = [g for g in pod["spec"].get("schedulingGates") or [] if g.get("name") != PLACEMENT_GATE]
    return {"spec": {"affinity": affinity, "schedulingGates": gates}}


FAILED_CREATE = "FailedCreate"
# The words of a pod create that failed for a while, not for good: an admission webhook that
# could not be called, the API server or etcd overloaded or timing out.
_PASSING_TROUBLE = ("failed calling webhook", "Internal error occurred", "Timeout:",
                    "the server is currently unable", "too many requests", "etcdserver")


@dataclass(frozen=True)
class Refusal:
    message: str  # the cluster's words, from the Event
    for_good: bool  # False: the Job controller's retries may yet succeed


def failed_create(events: list[dict[str, Any]], job_name: str, job_uid: str | None) -> Refusal | None:
    """The latest `FailedCreate` the Job controller reported for this Job (by uid when known,
    so a namesake deleted long ago does not count), or None."""
    mine = [e for e in events if e.get("reason") == FAILED_CREATE
            and (e.get("involvedObject") or {}).get("kind") == "Job"
            and e["involvedObject"].get("name") == job_name
            and (job_uid is None or e["involvedObject"].get("uid") == job_uid)]
    if not mine:
        return None
    latest = max(mine, key=lambda e: (e.get("lastTimestamp") or e.get("eventTime") or "",
                                      int(e["metadata"].get("resourceVersion") or 0)))
    message = str(latest.get("message") or "")
    passing = any(words.lower() in message.lower() for words in _PASSING_TROUBLE)
    return Refusal(message, for_good=not passing)


def node_problem(node: dict[str, Any] | None, *, cordon_is_a_problem: bool = True) -> str | None:
    """Why a node can no longer hold its runs' pods, or None while it can. A cordon is no
    problem for the node tracking, which drains a cordoned node instead (DECISIONS 100)."""
    if node is None:
        return "deleted"
    if cordon_is_a_problem and node.get("spec", {}).get("unschedulable"):
        return "cordoned"
    ready = next((c for c in node.get("status", {}).get("conditions") or []
                  if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        return "NotReady"
    return None


def _terminated(pod: Pod) -> dict[str, Any] | None:
    for status in pod.get("status", {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is not None:
            return dict(terminated)
    return None


def why_not_running(pod: Pod, lost_nodes: set[str]) -> str:
    """What keeps a pod from Running, in the words Kubernetes uses."""
    status = pod.get("status") or {}
    if gated(pod):
        return "waiting for its placement"
    node = pod["spec"].get("nodeName")
    if node in lost_nodes:
        return f"its node {node} is lost"
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"unschedulable ({cond.get('reason', '')}: {cond.get('message', '')})".rstrip(": )") + ")"
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason', 'waiting')}: {waiting.get('message', '')}".rstrip(": ")
    return f"{status.get('phase', 'Pending')}"


@dataclass(frozen=True)
class GangState:
    all_running: bool
    exit: Exit | None  # the run is over, from its pods' point of view
    waiting: list[str]  # why the pods not Running are not


def gang_state(pods: list[Pod], workers: int, lost_nodes: set[str]) -> GangState:
    by_index: dict[int, Pod] = {}
    for pod in pods:
        index = index_of(pod)
        if index is not None and not pod["metadata"].get("deletionTimestamp"):
            by_index[index] = pod
    phases = {i: (p.get("status") or {}).get("phase", "Pending") for i, p in by_index.items()}
    failed = sorted(i for i, phase in phases.items() if phase == "Failed")
    if failed:
        pod = by_index[failed[0]]
        terminated = _terminated(pod) or {}
        reason = terminated.get("reason") or (pod.get("status") or {}).get("reason") or "Error"
        code = terminated.get("exitCode")
        detail = f"worker {failed[0]} failed: {reason}"
        if code is not None:
            detail += f" (exit code {code})"
        if len(failed) > 1:
            detail = f"{len(failed)} of {workers} workers failed; {detail}"
        return GangState(False, Exit(code, detail), [])
    done = [i for i, phase in phases.items() if phase == "Succeeded"]
    if len(done) == workers:
        return GangState(True, Exit(0, f"all {workers} workers exited 0"), [])
    running = [i for i, phase in phases.items() if phase in ("Running", "Succeeded")]
    lost = sorted(i for i, p in by_index.items() if p["spec"].get("nodeName") in lost_nodes)
    waiting = [f"worker {i}: {why_not_running(by_index[i], lost_nodes)}"
               for i in sorted(by_index) if i not in running or i in lost]
    waiting += [f"worker {i}: no pod yet" for i in range(workers) if i not in by_index]
    all_running = len(running) == workers and not lost
    return GangState(all_running, None, waiting)


def judge(state: GangState, refusal: Refusal | None, lost_nodes: dict[str, str], *, started: bool,
          waited_s: float, start_timeout_s: float) -> tuple[bool, Exit | None]:
    """Whether the gang has started, and how the run ends now (None: it goes on). A failed
    worker or a refusal for good fails it; a lost node (with its problem), a started gang
    short of a member, or a start past the timeout loses it, to be requeued."""
    if state.exit is not None:
        return started, state.exit
    if refusal is not None and refusal.for_good:
        return started, Exit(None, f"Kubernetes refused a pod of the run: {refusal.message}")
    if state.all_running and not started:
        return True, None
    if lost_nodes:
        return started, Exit(None, "node lost: " + ", ".join(
            f"{node} ({problem})" for node, problem in lost_nodes.items()), lost=True)
    if started and state.waiting:
        return started, Exit(None, "a started gang lost a member: " + "; ".join(state.waiting),
                             lost=True)
    if not started and waited_s >= start_timeout_s:
        why = state.waiting + ([f"the last pod refused: {refusal.message}"] if refusal else [])
        return started, Exit(None, f"the gang did not start within {start_timeout_s:.0f} s: "
                             + "; ".join(why), lost=True)
    return started, None


def end_of_deleted_job(job: dict[str, Any], stopping: bool) -> Exit:
    """How a run ends whose Job a restarted executor finds already being deleted: a teardown
    begun before the restart, or someone's `kubectl delete`. A recorded stop, or the Job's
    own Complete or Failed condition, says why; otherwise nobody knows, and the run is lost
    (requeued from its checkpoint) rather than failed."""
    if stopping:
        return Exit(None, "stopped")
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return Exit(0, "its Job had completed before the executor adopted it")
        if condition.get("type") == "Failed":
            return Exit(None, f"its Job had failed before the executor adopted it: "
                        f"{condition.get('reason', '')}: {condition.get('message', '')}".rstrip(": "))
    return Exit(None, "its Job was being deleted when the executor adopted it; why was not"
                " recorded", lost=True)


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    if toleration.get("operator") == "Exists":
        return True
    return bool(toleration.get("key")) and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taints(node: dict[str, Any], tolerations: list[dict[str, Any]]) -> list[str]:
    """The node's NoSchedule and NoExecute taints that no toleration matches, as
    `key=value:Effect`: a pod pinned there stays Pending (NoExecute would also evict it)."""
    return [f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}".replace("=:", ":")
            for t in (node.get("spec") or {}).get("taints") or []
            if t.get("effect") in ("NoSchedule", "NoExecute")
            and not any(_tolerates(tol, t) for tol in tolerations)]
