"""The cluster behind the FAKE API server (`tests/fake_kube_apiserver.py`): its object store
with its history of changes (for watches), the controls a test turns, and a small control
loop that plays the Job controller, the scheduler, the kubelet and the garbage collector."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from rota.k8s.manifests import INDEX_ANNOTATION

from tests.fake_kube_containers import LocalContainers
from tests.fake_kube_rules import Obj, affinity_allows, matches_labels


def now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class PodPlan:
    """What the fake kubelet does with a pod once it is bound to a node."""

    start_after_s: float = 0.05
    exit_code: int | None = None  # None: runs until told, or deleted
    reason: str = ""  # e.g. OOMKilled, ErrImagePull (which keeps it Pending)
    stops_on_term_after_s: float = 0.2  # how long the process takes to exit after SIGTERM



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
        return self._put(plural, obj, "ADDED")

    def list(self, plural: str, namespace: str = "", selector: str | None = None) -> list[Obj]:
        return [o for (p, ns, _), o in sorted(self.objects.items())
                if p == plural and (not namespace or ns == namespace) and matches_labels(o, selector)]

    def get(self, plural: str, name: str, namespace: str = "") -> Obj | None:
        return self.objects.get((plural, namespace, name))

    def pods_of(self, job_name: str) -> list[Obj]:
        return [p for p in self.list("pods") if p["metadata"]["labels"].get("job-name") == job_name]

    # ------------------------------------------------------------------ test controls

    def add_node(self, name: str, gpus: int, *, labels: dict[str, str] | None = None,
                 gpu_resource: str = "nvidia.com/gpu") -> None:
        self.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
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

    def compact(self) -> None:
        """Forget the history: watches from an older resourceVersion get 410 Gone."""
        self.compacted_below = self.revision + 1
        self._generation += 1
        self._changed.set()

    # ------------------------------------------------------------------ the cluster's parts

    def _create_job_pods(self, job: Obj) -> None:
        template, name = job["spec"]["template"], job["metadata"]["name"]
        for index in range(job["spec"]["completions"]):
            meta = copy.deepcopy(template.get("metadata") or {})
            meta["name"] = f"{name}-{index}-{uuid.uuid4().hex[:5]}"
            meta["labels"] = {**meta.get("labels", {}), "job-name": name,
                              "batch.kubernetes.io/job-name": name,
                              "controller-uid": job["metadata"]["uid"],
                              "batch.kubernetes.io/job-completion-index": str(index)}
            meta["annotations"] = {**meta.get("annotations", {}), INDEX_ANNOTATION: str(index)}
            meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                        "uid": job["metadata"]["uid"], "controller": True,
                                        "blockOwnerDeletion": True}]
            spec = copy.deepcopy(template["spec"])
            spec["hostname"] = f"{name}-{index}"
            self.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                                 "spec": spec, "status": {"phase": "Pending"}},
                        job["metadata"]["namespace"])

    def _delete(self, plural: str, obj: Obj, policy: str, grace: float | None) -> None:
        if obj["metadata"].get("deletionTimestamp"):
            if plural == "pods" and grace == 0:  # a force delete: gone without its kubelet
                self._put(plural, copy.deepcopy(obj), "DELETED")
            return
        if plural == "pods":
            # A DELETE without a grace period (the garbage collector's, for a Job's pods) gives
            # the pod its own terminationGracePeriodSeconds, 30 s when the spec has none.
            if grace is None:
                grace = float(obj["spec"].get("terminationGracePeriodSeconds", 30))
            obj = copy.deepcopy(obj)
            obj["metadata"]["deletionTimestamp"] = now_stamp()
            obj["metadata"]["deletionGracePeriodSeconds"] = int(grace)
            self._term_at[obj["metadata"]["name"]] = time.monotonic()
            if obj["status"].get("phase") != "Running" or grace == 0:
                self._put(plural, obj, "DELETED")
            else:
                self._put(plural, obj, "MODIFIED")
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
        job = self.get("jobs", pod["metadata"]["labels"]["job-name"], pod["metadata"]["namespace"])
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
        want = {k: int(v) for k, v in pod["spec"]["containers"][0]["resources"].get(
            "limits", {}).items() if "gpu" in k}
        for resource, count in want.items():
            used = sum(int(p["spec"]["containers"][0]["resources"]["limits"].get(resource, 0))
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
        return self.plans.get(pod["metadata"]["labels"].get("job-name", ""), PodPlan())

    def _step(self) -> None:
        now = time.monotonic()
        for pod in self.list("pods"):
            name, status = pod["metadata"]["name"], pod["status"]
            plan = self._plan(pod)
            if pod["metadata"].get("deletionTimestamp"):
                if not self._kubelet_up(pod):
                    continue  # nobody to stop the process: Terminating until force-deleted
                grace = pod["metadata"]["deletionGracePeriodSeconds"]
                proc = self.containers.procs.get(name) if self.containers else None
                if proc is not None:
                    if proc.poll() is None and now - self._term_at[name] >= grace:
                        os.killpg(proc.pid, signal.SIGKILL)
                    elif proc.poll() is None and name not in self._term_sent:
                        self._term_sent.add(name)
                        with contextlib.suppress(ProcessLookupError):
                            os.killpg(proc.pid, signal.SIGTERM)
                    else:
                        self._put("pods", copy.deepcopy(pod), "DELETED")
                elif now - self._term_at[name] >= min(grace, plan.stops_on_term_after_s):
                    self._put("pods", copy.deepcopy(pod), "DELETED")
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
        for job in self.list("jobs"):
            if job["metadata"].get("deletionTimestamp") and not self._dependents(job):
                self._put("jobs", copy.deepcopy(job), "DELETED")

    async def _control_loop(self) -> None:
        while True:
            self._step()
            await asyncio.sleep(0.02)
