"""The node side of the FAKE cluster: the scheduler (which node a pod may be bound to, and the
scheduler's words when none will do) and the kubelet (Pending, Running, exit codes; a
container whose Secret is missing waits; termination within the pod's grace; nothing at all
on a node that is not Ready). `PodPlan` says what the kubelet does with a job's pods."""

from __future__ import annotations

import contextlib
import copy
import os
import signal
from dataclasses import dataclass, field

from tests.fake_kube_containers import LocalContainers
from tests.fake_kube_rules import Obj, affinity_allows, untolerated_taint
from tests.fake_kube_store import FakeStore, job_name_of, now_stamp


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


@dataclass
class FakeNodes(FakeStore):
    plans: dict[str, PodPlan] = field(default_factory=dict)  # pod name prefix (job name) -> plan
    containers: LocalContainers | None = None
    _bound_at: dict[str, float] = field(default_factory=dict)
    _term_sent: set[str] = field(default_factory=set)

    def _why_not_on(self, node: Obj, pod: Obj) -> str | None:
        """Why the scheduler will not bind the pod to the node, in its words; None if it will."""
        if node["spec"].get("unschedulable"):
            return "node(s) were unschedulable"
        if node["status"]["conditions"][0]["status"] != "True":
            return "node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
        if not affinity_allows(node, pod):
            return "node(s) didn't match Pod's node affinity/selector"
        if (taint := untolerated_taint(node, pod)) is not None:
            return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
        for resource, count in gpu_limits(pod).items():
            used = sum(int(gpu_limits(p).get(resource, 0))
                       for p in self.list("pods") if p["spec"].get("nodeName") ==
                       node["metadata"]["name"] and p["status"].get("phase") in ("Pending", "Running"))
            if used + int(count) > int(node["status"]["allocatable"].get(resource, 0)):
                return f"Insufficient {resource}"
        return None

    def _unschedulable_message(self, nodes: list[Obj], pod: Obj) -> str:
        reasons: dict[str, int] = {}
        for node in nodes:
            reason = self._why_not_on(node, pod) or ""
            reasons[reason] = reasons.get(reason, 0) + 1
        return f"0/{len(nodes)} nodes are available: " + ", ".join(
            f"{count} {reason}" for reason, count in sorted(reasons.items())) + "."

    def _secret_data(self, namespace: str, name: str) -> dict[str, str]:
        return dict((self.get("secrets", name, namespace) or {}).get("stringData", {}))

    def stop_containers(self) -> None:
        if self.containers is not None:
            self.containers.kill_all()

    def _missing_secret(self, pod: Obj) -> str | None:
        """A Secret the pod needs (a volume, or an env value not marked optional) that does
        not exist: the kubelet cannot start the container until it does."""
        namespace, spec = pod["metadata"]["namespace"], pod["spec"]
        wanted = [v["secret"]["secretName"] for v in spec.get("volumes") or []
                  if "secret" in v and not v["secret"].get("optional")]
        wanted += [ref["name"] for c in spec["containers"] for e in c.get("env") or []
                   if (ref := (e.get("valueFrom") or {}).get("secretKeyRef")) and not ref.get("optional")]
        return next((name for name in wanted if self.get("secrets", name, namespace) is None), None)

    def _kubelet_up(self, pod: Obj) -> bool:
        node = self.get("nodes", pod["spec"].get("nodeName") or "")
        return node is not None and node["status"]["conditions"][0]["status"] == "True"

    def _plan(self, pod: Obj) -> PodPlan:
        return self.plans.get(job_name_of(pod), PodPlan())

    def _terminate(self, pod: Obj, code: int, reason: str) -> None:
        pod = copy.deepcopy(pod)
        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
        pod["status"]["containerStatuses"] = [{
            "name": pod["spec"]["containers"][0]["name"], "ready": False, "restartCount": 0,
            "image": pod["spec"]["containers"][0]["image"], "imageID": "",
            "state": {"terminated": {"exitCode": code, "reason": reason or (
                "Completed" if code == 0 else "Error")}}}]
        self._put("pods", pod, "MODIFIED")

    def _kubelet_confirms_deletion(self, pod: Obj) -> None:
        """The kubelet's own DELETE with grace 0, once the pod's containers have stopped."""
        pod = copy.deepcopy(pod)
        pod["metadata"]["deletionGracePeriodSeconds"] = 0
        self._store_pod(pod)

    def _kubelet_and_scheduler(self, now: float) -> None:
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
                nodes = self.list("nodes")
                node = next((n for n in nodes if self._why_not_on(n, pod) is None), None)
                pod = copy.deepcopy(pod)
                if node is None:
                    unschedulable = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                      "message": self._unschedulable_message(nodes, pod)}]
                    if status.get("conditions") != unschedulable:
                        pod["status"]["conditions"] = unschedulable
                        self._put("pods", pod, "MODIFIED")
                    continue
                pod["spec"]["nodeName"] = node["metadata"]["name"]
                pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
                self._bound_at[name] = now
                self._put("pods", pod, "MODIFIED")
            elif (missing := self._missing_secret(pod)) is not None:
                waiting = {"reason": "CreateContainerConfigError", "message": f'secret "{missing}" not found'}
                if [c["state"].get("waiting") for c in status.get("containerStatuses") or []] != [waiting]:
                    pod = copy.deepcopy(pod)
                    pod["status"]["containerStatuses"] = [{
                        "name": "worker", "ready": False, "restartCount": 0, "image": "", "imageID": "",
                        "state": {"waiting": waiting}}]
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
