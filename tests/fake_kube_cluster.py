"""The cluster behind the FAKE API server (`tests/fake_kube_apiserver.py`): its object store
with its history of changes (for watches), the controls a test turns, pod admission, and a
small control loop that plays the Job controller, the scheduler, the kubelet and the garbage
collector."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from rota.k8s.manifests import INDEX_ANNOTATION

from tests.fake_kube_containers import LocalContainers
from tests.fake_kube_rules import Obj, affinity_allows, matches_labels, pod_security_restricted

log = logging.getLogger("tests.fake_kube")

JOB_TRACKING = "batch.kubernetes.io/job-tracking"
"""The finalizer the Job controller puts on each pod it creates, and takes off once it has
counted the pod (finished, being deleted, or its Job being deleted or gone)."""
PodAdmission = Callable[[Obj], "str | None"]
"""A validating admission step (a webhook, a ResourceQuota, a LimitRange): the API server's
whole error message for a pod it refuses, or None to admit it."""


def now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_name_of(pod: Obj) -> str:
    return str((pod["metadata"].get("labels") or {}).get("job-name", ""))


def gpu_limits(pod: Obj) -> dict[str, str]:
    limits = (pod["spec"]["containers"][0].get("resources") or {}).get("limits") or {}
    return {resource: count for resource, count in limits.items() if "gpu" in resource}


@dataclass
class PodPlan:
    """What the fake kubelet does with a pod once it is bound to a node."""

    start_after_s: float = 0.05
    exit_code: int | None = None  # None: runs until told, or deleted
    reason: str = ""  # e.g. OOMKilled, ErrImagePull (which keeps it Pending)
    stops_on_term_after_s: float = 0.2  # how long the process takes to exit after SIGTERM


def forbidden(pod: Obj, reason: str) -> str:
    """The API server's words for a pod that admission refused."""
    return f'pods "{pod["metadata"]["name"]}" is forbidden: {reason}'


@dataclass
class FakeCluster:
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)  # (plural, ns, name)
    log: list[tuple[int, str, str, Obj]] = field(default_factory=list)  # rv, plural, type, obj
    compacted_below: int = 0
    revision: int = 0
    plans: dict[str, PodPlan] = field(default_factory=dict)  # pod name prefix (job name) -> plan
    containers: LocalContainers | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _generation: int = 0  # bumped by `compact`, which ends the watches open then
    _term_at: dict[str, float] = field(default_factory=dict)
    _bound_at: dict[str, float] = field(default_factory=dict)
    _term_sent: set[str] = field(default_factory=set)
    admission: list[PodAdmission] = field(default_factory=list)  # after the built-in steps
    pod_security: dict[str, str] = field(default_factory=dict)  # namespace -> enforced level
    service_accounts: set[tuple[str, str]] = field(default_factory=set)  # beyond each "default"
    _pods_made: dict[str, set[int]] = field(default_factory=dict)  # Job uid -> indices created
    _next_create: dict[str, tuple[float, float]] = field(default_factory=dict)  # uid -> (at, backoff)

    # ------------------------------------------------------------------ store

    def _put(self, plural: str, obj: Obj, kind: str) -> Obj:
        self.revision += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.revision)
        key = (plural, meta.get("namespace", ""), meta["name"])
        if kind == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.log.append((self.revision, plural, kind, copy.deepcopy(obj)))
        self._changed.set()
        return obj

    def create(self, plural: str, obj: Obj, namespace: str = "") -> Obj:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if namespace:
            meta["namespace"] = namespace
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_stamp())
        if plural == "pods":  # the API server's defaulting
            obj["spec"].setdefault("terminationGracePeriodSeconds", 30)
            obj["status"] = obj.get("status") or {"phase": "Pending"}
        return self._put(plural, obj, "ADDED")

    def list(self, plural: str, namespace: str = "", selector: str | None = None) -> list[Obj]:
        return [o for (p, ns, _), o in sorted(self.objects.items())
                if p == plural and (not namespace or ns == namespace) and matches_labels(o, selector)]

    def get(self, plural: str, name: str, namespace: str = "") -> Obj | None:
        return self.objects.get((plural, namespace, name))

    def pods_of(self, job_name: str) -> list[Obj]:
        return [p for p in self.list("pods") if job_name_of(p) == job_name]

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

    def remove_node(self, name: str) -> None:
        self._put("nodes", copy.deepcopy(self.objects[("nodes", "", name)]), "DELETED")

    def exit_pods(self, job_name: str, code: int, reason: str = "", index: int | None = None) -> None:
        """The containers of a job's running pods exit with `code`."""
        for pod in self.pods_of(job_name):
            chosen = index is None or pod["metadata"]["annotations"][INDEX_ANNOTATION] == str(index)
            if chosen and pod["status"].get("phase") == "Running":
                self._terminate(pod, code, reason)

    def enforce_pod_security(self, namespace: str, level: str = "restricted") -> None:
        """The namespace's `pod-security.kubernetes.io/enforce` label: pods that break the
        level are refused."""
        self.pod_security[namespace] = level

    def add_service_account(self, namespace: str, name: str) -> None:
        self.service_accounts.add((namespace, name))

    def events_of(self, name: str, kind: str = "Job") -> list[Obj]:
        return [e for e in self.list("events") if e["involvedObject"]["name"] == name
                and e["involvedObject"]["kind"] == kind]

    def compact(self) -> None:
        """Forget the history: watches from an older resourceVersion get 410 Gone."""
        self.compacted_below = self.revision + 1
        self._generation += 1
        self._changed.set()

    # ------------------------------------------------------------------ the cluster's parts

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

    def record_event(self, involved: Obj, kind: str, event_type: str, reason: str,
                     message: str, component: str) -> None:
        """A core/v1 Event about `involved`; a repeat of the same one is counted, not stored
        twice, as the real event recorder does."""
        meta = involved["metadata"]
        for event in self.events_of(meta["name"], kind):
            if event["involvedObject"]["uid"] == meta["uid"] and \
                    (event["reason"], event["message"]) == (reason, message):
                event = copy.deepcopy(event)
                event["count"] += 1
                event["lastTimestamp"] = now_stamp()
                self._put("events", event, "MODIFIED")
                return
        self.create("events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}"},
            "involvedObject": {"kind": kind, "namespace": meta.get("namespace", ""),
                               "name": meta["name"], "uid": meta["uid"],
                               "apiVersion": involved["apiVersion"],
                               "resourceVersion": meta["resourceVersion"]},
            "reason": reason, "message": message, "type": event_type,
            "source": {"component": component}, "reportingComponent": component,
            "reportingInstance": "", "count": 1,
            "firstTimestamp": now_stamp(), "lastTimestamp": now_stamp()}, meta.get("namespace", ""))

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

    def _store_pod(self, pod: Obj) -> None:
        """An update of a pod: one being deleted whose grace is over (0) and that has no
        finalizer left is gone, as the API server removes it then."""
        meta = pod["metadata"]
        gone = meta.get("deletionTimestamp") and meta.get("deletionGracePeriodSeconds") == 0 \
            and not meta.get("finalizers")
        self._put("pods", pod, "DELETED" if gone else "MODIFIED")

    def _delete(self, plural: str, obj: Obj, policy: str, grace: float | None) -> None:
        if plural == "pods":
            self._delete_pod(obj, grace)
            return
        if obj["metadata"].get("deletionTimestamp"):
            return
        dependents = self._dependents(obj)
        if policy == "Foreground" and dependents:
            obj = copy.deepcopy(obj)
            obj["metadata"]["deletionTimestamp"] = now_stamp()
            obj["metadata"]["finalizers"] = ["foregroundDeletion"]
            self._put(plural, obj, "MODIFIED")
        else:
            self._put(plural, copy.deepcopy(obj), "DELETED")
        if policy != "Orphan":
            # The garbage collector deletes dependents with no grace period of its own: the
            # grace given with the owner's DELETE applies to the owner alone.
            for dep_plural, dep in dependents:
                self._delete(dep_plural, dep, "Background", None)

    def _delete_pod(self, pod: Obj, grace: float | None) -> None:
        """A DELETE without a grace period (the garbage collector's) gives the pod its own
        terminationGracePeriodSeconds. An unscheduled or finished pod needs no kubelet: its
        grace is 0. With grace 0 it is gone at once, unless a finalizer still holds it."""
        pod = copy.deepcopy(pod)
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            if grace is not None and grace < meta["deletionGracePeriodSeconds"]:
                meta["deletionGracePeriodSeconds"] = int(grace)  # only ever shortened
                self._store_pod(pod)
            return
        if grace is None:
            grace = float(pod["spec"].get("terminationGracePeriodSeconds", 30))
        if not pod["spec"].get("nodeName") or pod["status"].get("phase") in ("Succeeded", "Failed"):
            grace = 0
        meta["deletionTimestamp"] = now_stamp()
        meta["deletionGracePeriodSeconds"] = int(grace)
        self._term_at[meta["name"]] = time.monotonic()
        self._store_pod(pod)

    def _kubelet_confirms_deletion(self, pod: Obj) -> None:
        """The kubelet's own DELETE with grace 0, once the pod's containers have stopped."""
        pod = copy.deepcopy(pod)
        pod["metadata"]["deletionGracePeriodSeconds"] = 0
        self._store_pod(pod)

    def _dependents(self, owner: Obj) -> list[tuple[str, Obj]]:
        uid = owner["metadata"]["uid"]
        return [(p, o) for (p, _, _), o in list(self.objects.items())
                if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences") or [])]

    def _terminate(self, pod: Obj, code: int, reason: str) -> None:
        pod = copy.deepcopy(pod)
        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
        pod["status"]["containerStatuses"] = [{
            "name": pod["spec"]["containers"][0]["name"], "ready": False, "restartCount": 0,
            "image": pod["spec"]["containers"][0]["image"], "imageID": "",
            "state": {"terminated": {"exitCode": code, "reason": reason or (
                "Completed" if code == 0 else "Error")}}}]
        self._put("pods", pod, "MODIFIED")
        self._job_status(pod)

    def _job_status(self, pod: Obj) -> None:
        job = self.get("jobs", job_name_of(pod), pod["metadata"]["namespace"])
        if job is None or job["metadata"].get("deletionTimestamp"):
            return
        pods = self.pods_of(job["metadata"]["name"])
        job = copy.deepcopy(job)
        status = job.setdefault("status", {})
        status["succeeded"] = sum(p["status"].get("phase") == "Succeeded" for p in pods)
        status["failed"] = sum(p["status"].get("phase") == "Failed" for p in pods)
        status["active"] = len(pods) - status["succeeded"] - status["failed"]
        if status["failed"]:
            status["conditions"] = [{"type": "Failed", "status": "True",
                                     "reason": "BackoffLimitExceeded"}]
        elif status["succeeded"] == job["spec"]["completions"]:
            status["conditions"] = [{"type": "Complete", "status": "True"}]
        self._put("jobs", job, "MODIFIED")

    def _node_fits(self, node: Obj, pod: Obj) -> bool:
        if node["spec"].get("unschedulable") or \
                node["status"]["conditions"][0]["status"] != "True":
            return False
        if not affinity_allows(node, pod):
            return False
        want = {k: int(v) for k, v in gpu_limits(pod).items()}
        for resource, count in want.items():
            used = sum(int(gpu_limits(p).get(resource, 0))
                       for p in self.list("pods") if p["spec"].get("nodeName") ==
                       node["metadata"]["name"] and p["status"].get("phase") in ("Pending", "Running"))
            if used + count > int(node["status"]["allocatable"].get(resource, 0)):
                return False
        return True

    def _secret_data(self, namespace: str, name: str) -> dict[str, str]:
        return dict((self.get("secrets", name, namespace) or {}).get("stringData", {}))

    def stop_containers(self) -> None:
        if self.containers is not None:
            self.containers.kill_all()

    def _kubelet_up(self, pod: Obj) -> bool:
        node = self.get("nodes", pod["spec"].get("nodeName") or "")
        return node is not None and node["status"]["conditions"][0]["status"] == "True"

    def _plan(self, pod: Obj) -> PodPlan:
        return self.plans.get(job_name_of(pod), PodPlan())

    def _step(self) -> None:
        now = time.monotonic()
        for pod in self.list("pods"):
            name, status = pod["metadata"]["name"], pod["status"]
            plan = self._plan(pod)
            if pod["metadata"].get("deletionTimestamp"):
                grace = pod["metadata"]["deletionGracePeriodSeconds"]
                if grace == 0 or not self._kubelet_up(pod):
                    # Held by a finalizer only; or nobody to stop the process: Terminating
                    # until force-deleted.
                    continue
                proc = self.containers.procs.get(name) if self.containers else None
                if proc is not None:
                    if proc.poll() is None and now - self._term_at[name] >= grace:
                        os.killpg(proc.pid, signal.SIGKILL)
                    elif proc.poll() is None and name not in self._term_sent:
                        self._term_sent.add(name)
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(proc.pid, signal.SIGTERM)
                    else:
                        self._kubelet_confirms_deletion(pod)
                elif now - self._term_at[name] >= min(grace, plan.stops_on_term_after_s):
                    self._kubelet_confirms_deletion(pod)
                continue
            proc = self.containers.procs.get(name) if self.containers else None
            if proc is not None and status.get("phase") == "Running" and proc.poll() is not None:
                code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
                self._terminate(pod, code, "")
                continue
            if status.get("phase") != "Pending" or pod["spec"].get("schedulingGates"):
                continue
            if not pod["spec"].get("nodeName"):
                node = next((n for n in self.list("nodes") if self._node_fits(n, pod)), None)
                pod = copy.deepcopy(pod)
                if node is None:
                    if not status.get("conditions"):
                        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False",
                                                        "reason": "Unschedulable"}]
                        self._put("pods", pod, "MODIFIED")
                    continue
                pod["spec"]["nodeName"] = node["metadata"]["name"]
                pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
                self._bound_at[name] = now
                self._put("pods", pod, "MODIFIED")
            elif plan.reason == "ErrImagePull":
                if not status.get("containerStatuses"):
                    pod = copy.deepcopy(pod)
                    pod["status"]["containerStatuses"] = [{
                        "name": "worker", "ready": False, "restartCount": 0, "image": "", "imageID": "",
                        "state": {"waiting": {"reason": "ErrImagePull"}}}]
                    self._put("pods", pod, "MODIFIED")
            elif now - self._bound_at.get(name, now) >= plan.start_after_s:
                pod = copy.deepcopy(pod)
                pod["status"].update(phase="Running", podIP="10.0.0.1", startTime=now_stamp())
                pod["status"]["containerStatuses"] = [{
                    "name": "worker", "ready": True, "restartCount": 0, "image": "", "imageID": "",
                    "state": {"running": {"startedAt": now_stamp()}}}]
                self._put("pods", pod, "MODIFIED")
                if self.containers is not None:
                    self.containers.run(pod, self._secret_data)
                if plan.exit_code is not None:
                    self._terminate(self.objects[("pods", pod["metadata"]["namespace"], name)],
                                    plan.exit_code, plan.reason)
        self._job_controller(now)
        for job in self.list("jobs"):
            if job["metadata"].get("deletionTimestamp") and not self._dependents(job):
                self._put("jobs", copy.deepcopy(job), "DELETED")

    async def _control_loop(self) -> None:
        while True:
            try:
                self._step()
            except Exception:  # a bug of the fake: said loudly, and the cluster goes on
                log.exception("fake cluster: a step of the control loop failed")
            await asyncio.sleep(0.02)
