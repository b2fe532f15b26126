"""The cluster behind the FAKE API server (`tests/fake_kube_apiserver.py`): the controls a test
turns, pod admission, the Job controller, and the control loop that steps every part (the
scheduler and the kubelet of `fake_kube_nodes`, the garbage collector's foreground
deletion) every 20 ms. The store it acts on is `fake_kube_store`."""

from __future__ import annotations

import asyncio
import copy
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from rota.k8s.manifests import INDEX_ANNOTATION

from tests.fake_kube_nodes import FakeNodes, PodPlan
from tests.fake_kube_rules import Obj, pod_security_restricted
from tests.fake_kube_store import job_name_of, now_stamp

__all__ = ["JOB_TRACKING", "FakeCluster", "PodAdmission", "PodPlan", "forbidden", "now_stamp"]

log = logging.getLogger("tests.fake_kube")

JOB_TRACKING = "batch.kubernetes.io/job-tracking"
"""The finalizer the Job controller puts on each pod it creates, and takes off once it has
counted the pod (finished, being deleted, or its Job being deleted or gone)."""
PodAdmission = Callable[[Obj], "str | None"]
"""A validating admission step (a webhook, a ResourceQuota, a LimitRange): the API server's
whole error message for a pod it refuses, or None to admit it."""


def forbidden(pod: Obj, reason: str) -> str:
    """The API server's words for a pod that admission refused."""
    return f'pods "{pod["metadata"]["name"]}" is forbidden: {reason}'


@dataclass
class FakeCluster(FakeNodes):
    admission: list[PodAdmission] = field(default_factory=list)  # after the built-in steps
    pod_security: dict[str, str] = field(default_factory=dict)  # namespace -> enforced level
    service_accounts: set[tuple[str, str]] = field(default_factory=set)  # beyond each "default"
    _pods_made: dict[str, set[int]] = field(default_factory=dict)  # Job uid -> indices created
    _next_create: dict[str, tuple[float, float]] = field(default_factory=dict)  # uid -> (at, backoff)

    # ------------------------------------------------------------------ test controls

    def add_node(self, name: str, gpus: int, *, labels: dict[str, str] | None = None,
                 gpu_resource: str = "nvidia.com/gpu", hostname: str | None = None) -> None:
        """A Ready node. Its `kubernetes.io/hostname` label is the kubelet's hostname, which
        need not be the node's name (cloud nodes named by instance id, FQDN hostnames)."""
        self.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"kubernetes.io/hostname": hostname or name, **(labels or {})}},
            "spec": {}, "status": {"allocatable": {gpu_resource: str(gpus), "cpu": "64"},
                                   "capacity": {gpu_resource: str(gpus), "cpu": "64"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}})

    def set_node(self, name: str, *, ready: bool | None = None, cordoned: bool | None = None,
                 gpus: int | None = None, gpu_resource: str = "nvidia.com/gpu") -> None:
        node = copy.deepcopy(self.objects[("nodes", "", name)])
        if gpus is not None:
            node["status"]["allocatable"][gpu_resource] = str(gpus)
        if ready is not None:
            node["status"]["conditions"] = [{"type": "Ready", "status": str(ready)}]
        if cordoned is not None:
            node["spec"]["unschedulable"] = cordoned
        self._put("nodes", node, "MODIFIED")

    def taint_node(self, name: str, key: str, value: str = "", effect: str = "NoSchedule") -> None:
        node = copy.deepcopy(self.objects[("nodes", "", name)])
        node["spec"].setdefault("taints", []).append({"key": key, "value": value, "effect": effect})
        self._put("nodes", node, "MODIFIED")

    def remove_node(self, name: str) -> None:
        self._put("nodes", copy.deepcopy(self.objects[("nodes", "", name)]), "DELETED")

    def exit_pods(self, job_name: str, code: int, reason: str = "", index: int | None = None) -> None:
        """The containers of a job's running pods exit with `code`."""
        for pod in self.pods_of(job_name):
            chosen = index is None or pod["metadata"]["annotations"][INDEX_ANNOTATION] == str(index)
            if chosen and pod["status"].get("phase") == "Running":
                self._terminate(pod, code, reason)

    def delete(self, plural: str, obj: Obj, *, propagation: str = "Background",
               grace: float | None = None) -> None:
        """A DELETE from someone other than the executor (`kubectl delete`)."""
        self._delete(plural, obj, propagation, grace)

    def enforce_pod_security(self, namespace: str, level: str = "restricted") -> None:
        """The namespace's `pod-security.kubernetes.io/enforce` label: pods that break the
        level are refused."""
        self.pod_security[namespace] = level

    def add_service_account(self, namespace: str, name: str) -> None:
        self.service_accounts.add((namespace, name))

    # ------------------------------------------------------------------ the controllers

    def admit_pod(self, pod: Obj) -> str | None:
        """The API server's whole error message for a pod its admission refuses: its service
        account missing, the namespace's Pod Security level broken, or a step of `admission`."""
        namespace = pod["metadata"]["namespace"]
        account = pod["spec"].get("serviceAccountName") or "default"
        if account != "default" and (namespace, account) not in self.service_accounts:
            return forbidden(pod, f"error looking up service account {namespace}/{account}: "
                                  f'serviceaccount "{account}" not found')
        if self.pod_security.get(namespace) == "restricted" and \
                (broken := pod_security_restricted(pod)) is not None:
            return forbidden(pod, f'violates PodSecurity "restricted:latest": {broken}')
        return next((refusal for admit in self.admission if (refusal := admit(pod)) is not None), None)

    def _job_pod(self, job: Obj, index: int) -> Obj:
        template, name = job["spec"]["template"], job["metadata"]["name"]
        meta = copy.deepcopy(template.get("metadata") or {})
        meta["name"] = f"{name}-{index}-{uuid.uuid4().hex[:5]}"  # generateName: <job>-<index>-
        meta["namespace"] = job["metadata"]["namespace"]
        meta["labels"] = {**meta.get("labels", {}), "job-name": name,
                          "batch.kubernetes.io/job-name": name,
                          "controller-uid": job["metadata"]["uid"],
                          "batch.kubernetes.io/job-completion-index": str(index)}
        meta["annotations"] = {**meta.get("annotations", {}), INDEX_ANNOTATION: str(index)}
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                    "uid": job["metadata"]["uid"], "controller": True,
                                    "blockOwnerDeletion": True}]
        meta["finalizers"] = [JOB_TRACKING]
        spec = copy.deepcopy(template["spec"])
        spec["hostname"] = f"{name}-{index}"
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
                "status": {"phase": "Pending"}}

    def _job_controller(self, now: float) -> None:
        """Creates the pods of each live Job, after the Job exists (so never in the Job's own
        create): a refused pod is a FailedCreate Event on the Job, retried with backoff. With
        `backoffLimit: 0` in mind, an index gets one pod only: no replacement is ever made."""
        for job in self.list("jobs"):
            uid = job["metadata"]["uid"]
            if not job["metadata"].get("deletionTimestamp"):
                self._job_status(job)
                job = self.objects[("jobs", job["metadata"]["namespace"], job["metadata"]["name"])]
            conditions = (job.get("status") or {}).get("conditions") or []
            if job["metadata"].get("deletionTimestamp") or any(
                    c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions):
                continue
            made = self._pods_made.setdefault(uid, set())
            at, backoff = self._next_create.get(uid, (0.0, 0.0))
            if len(made) == job["spec"]["completions"] or now < at:
                continue
            for index in sorted(set(range(job["spec"]["completions"])) - made):
                pod = self._job_pod(job, index)
                refusal = self.admit_pod(pod)
                if refusal is not None:
                    self.record_event(job, "Job", "Warning", "FailedCreate",
                                      f"Error creating: {refusal}", "job-controller")
                    backoff = min(max(backoff * 2, 0.2), 5.0)
                    self._next_create[uid] = (now + backoff, backoff)
                    break
                self.create("pods", pod)
                made.add(index)
        for pod in self.list("pods"):
            if JOB_TRACKING not in (pod["metadata"].get("finalizers") or []):
                continue
            job = self.get("jobs", job_name_of(pod), pod["metadata"]["namespace"])
            if pod["status"].get("phase") in ("Succeeded", "Failed") or \
                    pod["metadata"].get("deletionTimestamp") or job is None or \
                    job["metadata"].get("deletionTimestamp"):
                pod = copy.deepcopy(pod)
                pod["metadata"]["finalizers"].remove(JOB_TRACKING)
                self._store_pod(pod)

    def _job_status(self, job: Obj) -> None:
        """The Job's counts and its Complete or Failed condition, from its pods."""
        pods = self.pods_of(job["metadata"]["name"])
        status = copy.deepcopy(job.get("status") or {})
        status["succeeded"] = sum(p["status"].get("phase") == "Succeeded" for p in pods)
        status["failed"] = sum(p["status"].get("phase") == "Failed" for p in pods)
        status["active"] = len(pods) - status["succeeded"] - status["failed"]
        if status["failed"]:
            status["conditions"] = [{"type": "Failed", "status": "True",
                                     "reason": "BackoffLimitExceeded",
                                     "message": "Job has reached the specified backoff limit"}]
        elif status["succeeded"] == job["spec"]["completions"]:
            status["conditions"] = [{"type": "Complete", "status": "True"}]
        if status != job.get("status"):
            self._put("jobs", {**copy.deepcopy(job), "status": status}, "MODIFIED")

    def _step(self) -> None:
        now = time.monotonic()
        self._kubelet_and_scheduler(now)
        self._job_controller(now)
        for job in self.list("jobs"):  # the garbage collector's foreground deletion
            if job["metadata"].get("deletionTimestamp") and not self._dependents(job):
                self._put("jobs", copy.deepcopy(job), "DELETED")

    async def _control_loop(self) -> None:
        while True:
            try:
                self._step()
            except Exception:  # a bug of the fake: said loudly, and the cluster goes on
                log.exception("fake cluster: a step of the control loop failed")
            await asyncio.sleep(0.02)
