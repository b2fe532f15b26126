"""The `kubernetes` backend as the responder for its own pods' evictions
(lifecycle.k8s.io/v1alpha1, Kubernetes 1.37 with the `EvictionRequestAPI` gate; DECISIONS 100).

Where the API server serves them (asked once at start), each run's pods name Rota in
`spec.evictionResponders` (`rota.dev/executor`, priority 10000: the managing controller's,
as the API's documentation asks), and the runs namespace's EvictionRequests and Evictions are
listed and watched. A run is asked to go when an EvictionRequest with intent `Eviction`, or an
Eviction whose `status.targetResponders` has Rota `Active`, targets one of its pods (name and
uid): that starts the run's checkpoint preemption (`RunEvictionRequested`: notice,
acknowledgement, stop `drained`, requeue); once no request or Eviction asks any more, a
`withdrawn` one is sent, which cancels the stop if it was not ordered yet. The run's pods are
deleted with its Job after the checkpoint, never evicted.

On an Eviction where Rota is the active responder, Rota writes its own entry of
`status.responders` and nothing else: `startTime` and a `heartbeatTime` at once, the
heartbeat again every `HEARTBEAT_S` while the job saves and stops (the API passes the
eviction on to the next responder after 20 minutes without one), and `completionTime` once
the target pod is gone. Requests' status and the Eviction's conditions and target responders
belong to the evictionrequest-controller. Kubernetes 1.37.2 serves both resources but its
kube-controller-manager has no such controller, so on it no Eviction is made from a request:
Rota then acts on the request alone, and there is no Eviction to heartbeat on.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException
from rota.k8s import manifests as k

from rota_executor.backend import Reporter
from rota_executor.kube_calls import KubeCalls, describe

log = logging.getLogger("rota.executor.kubernetes")

GROUP, VERSION, PLURAL = "lifecycle.k8s.io", "v1alpha1", "evictionrequests"
EVICTIONS = "evictions"
HEARTBEAT_S = 60.0
"""How often Rota heartbeats on an Eviction it is the active responder of (the API's deadline
is 20 minutes)."""
RESPONDER = "rota.dev/executor"
RESPONDER_PRIORITY = 10000
"""What the API's documentation asks of the responder that is the pod's managing controller."""
INTENT_EVICTION = "Eviction"


def with_responder(job: dict[str, Any]) -> dict[str, Any]:
    """The Job whose pods name Rota as their eviction responder (a field the API server keeps
    only with the gate on, so it is added only where EvictionRequests are served)."""
    spec = job["spec"]["template"]["spec"]
    spec["evictionResponders"] = [{"name": RESPONDER, "priority": RESPONDER_PRIORITY}]
    return job


def requested_runs(requests: list[dict[str, Any]], pods: dict[str, dict[str, Any]]
                   ) -> dict[str, tuple[dict[str, Any], str]]:
    """Run id → (its pod, the requesters) of each run a pod of which an EvictionRequest with
    intent `Eviction` targets, by name and uid (a namesake pod of another run is not it)."""
    out: dict[str, tuple[dict[str, Any], list[str]]] = {}
    for request in requests:
        spec = request.get("spec") or {}
        target = (spec.get("target") or {}).get("pod") or {}
        pod = pods.get(str(target.get("name")))
        if spec.get("intent") != INTENT_EVICTION or pod is None:
            continue
        if pod["metadata"].get("uid") != target.get("uid"):
            continue
        run_id = (pod["metadata"].get("labels") or {}).get(k.LABEL_RUN)
        if run_id:
            out.setdefault(run_id, (pod, []))[1].append(str(spec.get("requester") or "?"))
    return {run: (pod, ", ".join(sorted(set(who)))) for run, (pod, who) in out.items()}


def active_evictions(evictions: list[dict[str, Any]], pods: dict[str, dict[str, Any]]
                     ) -> dict[str, tuple[dict[str, Any], str, dict[str, Any]]]:
    """Run id → (its pod, the requesters, the Eviction) of each Eviction of a run's pod whose
    target responders have Rota `Active`."""
    out: dict[str, tuple[dict[str, Any], str, dict[str, Any]]] = {}
    for eviction in evictions:
        status = eviction.get("status") or {}
        if not any(r.get("name") == RESPONDER and r.get("state") == "Active"
                   for r in status.get("targetResponders") or []):
            continue
        target = ((eviction.get("spec") or {}).get("target") or {}).get("pod") or {}
        pod = pods.get(str(target.get("name")))
        if pod is None or pod["metadata"].get("uid") != target.get("uid"):
            continue
        run_id = (pod["metadata"].get("labels") or {}).get(k.LABEL_RUN)
        if run_id:
            who = ", ".join(sorted(str(r.get("name")) for r in status.get("requesters") or []
                                   if r.get("intent") == INTENT_EVICTION)) or "an Eviction"
            out[run_id] = (pod, who, eviction)
    return out


def responder_status(eviction: dict[str, Any], now: datetime, *, completed: bool,
                     message: str) -> dict[str, Any]:
    """The Eviction with Rota's own entry of `status.responders` started (if new), heartbeat
    now, and completed if `completed`; every other entry as it was."""
    out = copy.deepcopy(eviction)
    status = out.setdefault("status", {})
    responders = status.setdefault("responders", [])
    mine = next((r for r in responders if r.get("name") == RESPONDER), None)
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if mine is None:
        mine = {"name": RESPONDER}
        responders.append(mine)
    mine.setdefault("startTime", stamp)  # set by the controller as it activates Rota, if not
    mine["heartbeatTime"] = stamp
    mine["message"] = message[:1024]
    if completed:
        mine["completionTime"] = stamp
    return out


class EvictionRequests:
    """Mixed into the backend, which provides the reporter, the calls, the pods and the runs."""

    reporter: Reporter
    calls: KubeCalls
    namespace: str
    pods: dict[str, dict[str, Any]]
    eviction_requests: dict[str, dict[str, Any]]  # by name, as last listed or watched
    evictions_served: bool
    evictions_reported: dict[str, tuple[str, str, str]]  # run id -> (requesters, node, pod)
    evictions: dict[str, dict[str, Any]]  # Eviction objects by name, as last listed or watched
    heartbeats: dict[str, float]  # Eviction name -> clock seconds of Rota's last heartbeat
    completed_evictions: set[str]  # Eviction names Rota marked complete

    def _now(self) -> float:
        raise NotImplementedError

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        raise NotImplementedError

    def job_of(self, run_id: str) -> str | None:
        raise NotImplementedError

    async def detect_eviction_requests(self) -> bool:
        try:
            served = await self.calls.serves(GROUP, VERSION, PLURAL)
        except Exception as exc:  # discovery failing says nothing of the API: go without
            log.warning("could not ask whether %s/%s %s are served (%s); not responding to"
                        " them", GROUP, VERSION, PLURAL, describe(exc)[:300])
            served = False
        self.evictions_served = served
        log.info("EvictionRequests (%s/%s) %s", GROUP, VERSION,
                 "served: Rota responds to those for its pods" if served else "not served")
        return served

    async def watch_eviction_requests(self) -> None:
        await self.calls.list_watch(
            self.eviction_requests, lambda: None, self._refresh_evictions,
            self.calls.custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace,
            PLURAL)

    async def watch_evictions(self) -> None:
        await self.calls.list_watch(
            self.evictions, lambda: None, self._refresh_evictions,
            self.calls.custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace,
            EVICTIONS)

    async def respond_to_evictions(self) -> None:
        """One pass: heartbeat on each Eviction Rota is the active responder of, and mark it
        complete once its target pod is gone. A failed write is tried again next pass."""
        if not self.evictions_served:
            return
        for name, eviction in list(self.evictions.items()):
            if name in self.completed_evictions:
                continue
            status = eviction.get("status") or {}
            if not any(r.get("name") == RESPONDER and r.get("state") == "Active"
                       for r in status.get("targetResponders") or []):
                continue
            target = ((eviction.get("spec") or {}).get("target") or {}).get("pod") or {}
            pod = self.pods.get(str(target.get("name")))
            gone = pod is None or pod["metadata"].get("uid") != target.get("uid")
            if not gone and self._now() - self.heartbeats.get(name, -HEARTBEAT_S) < HEARTBEAT_S:
                continue
            message = ("Rota: the run saved its checkpoint and stopped; its pods are deleted"
                       if gone else "Rota: the run is saving its checkpoint before it stops")
            try:
                await self._write_responder(name, completed=gone, message=message)
            except Exception as exc:
                log.warning("Eviction %s: Rota's responder status not written (%s); the next"
                            " pass tries again", name, describe(exc)[:300])
                continue
            self.heartbeats[name] = self._now()
            if gone:
                self.completed_evictions.add(name)
                log.info("Eviction %s: its target is gone; Rota's part is complete", name)

    async def _write_responder(self, name: str, *, completed: bool, message: str) -> None:
        """Read, change Rota's own entry, replace: the status's other entries are not Rota's,
        and a list of entries cannot be merged by a JSON merge patch. A conflict (someone
        wrote meanwhile) reads again."""
        custom = self.calls.custom
        for _ in range(3):
            current = await self.calls.call(
                f"read Eviction {name}", custom.get_namespaced_custom_object_status, GROUP,
                VERSION, self.namespace, EVICTIONS, name)
            body = responder_status(current, datetime.fromtimestamp(self._now(), UTC),
                                    completed=completed, message=message)
            try:
                await self.calls.call(
                    f"write Eviction {name} status", custom.replace_namespaced_custom_object_status,
                    GROUP, VERSION, self.namespace, EVICTIONS, name, body)
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise
        raise RuntimeError(f"Eviction {name}: kept conflicting")

    def _refresh_evictions(self) -> None:
        """Report each run newly requested, and each whose every request was withdrawn."""
        if not self.evictions_served:
            return
        wanted = requested_runs(list(self.eviction_requests.values()), self.pods)
        for run_id, (pod, who, _) in active_evictions(list(self.evictions.values()),
                                                      self.pods).items():
            wanted.setdefault(run_id, (pod, who))
        for run_id, (pod, requesters) in wanted.items():
            job_id = self.job_of(run_id)
            node, name = pod["spec"].get("nodeName") or "", pod["metadata"]["name"]
            if job_id is None or not node or self.evictions_reported.get(run_id) == (
                    requesters, node, name):
                continue
            self.evictions_reported[run_id] = (requesters, node, name)
            log.warning("kubernetes run %s: eviction of pod %s requested by %s: stopping it"
                        " after its checkpoint", run_id, pod["metadata"]["name"], requesters)
            self._spawn(self.reporter.run_eviction(run_id, job_id, node, pod["metadata"]["name"],
                                                   requesters, withdrawn=False))
        for run_id in list(self.evictions_reported.keys() - wanted.keys()):
            requesters, node, name = self.evictions_reported.pop(run_id)
            job_id = self.job_of(run_id)
            if job_id is None:
                continue  # the run is over: nothing to withdraw
            log.info("kubernetes run %s: every eviction request withdrawn", run_id)
            self._spawn(self.reporter.run_eviction(run_id, job_id, node, name, requesters,
                                                   withdrawn=True))
