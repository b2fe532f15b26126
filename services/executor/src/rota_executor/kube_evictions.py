"""The `kubernetes` backend as the responder for its own pods' EvictionRequests
(lifecycle.k8s.io/v1alpha1, Kubernetes 1.37 with the `EvictionRequestAPI` gate; DECISIONS 98).

Where the API server serves EvictionRequests (asked once at start), each run's pods name Rota
in `spec.evictionResponders` (`rota.dev/executor`, priority 10000: the managing controller's,
as the API's documentation asks), and the runs namespace's EvictionRequests are listed and
watched. One whose intent is `Eviction` and whose target is a pod of a run (name and uid)
starts that run's checkpoint preemption (`RunEvictionRequested`: notice, acknowledgement, stop
`drained`, requeue); once every requester has withdrawn or deleted its request, a
`withdrawn` one is sent, which cancels the stop if it was not ordered yet. The run's pods are
deleted with its Job after the checkpoint, so the request's target is gone.

What the served API leaves out: Kubernetes 1.37.2 serves EvictionRequest and Eviction but its
kube-controller-manager has no evictionrequest-controller, so no Eviction (the object whose
`status.responders` a responder heartbeats and completes) is ever made from a request. Rota
reads the requests themselves and writes no status: both the request's and the Eviction's
status belong to that controller.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any

from rota.k8s import manifests as k

from rota_executor.backend import Reporter
from rota_executor.kube_calls import KubeCalls, describe

log = logging.getLogger("rota.executor.kubernetes")

GROUP, VERSION, PLURAL = "lifecycle.k8s.io", "v1alpha1", "evictionrequests"
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


class EvictionRequests:
    """Mixed into the backend, which provides the reporter, the calls, the pods and the runs."""

    reporter: Reporter
    calls: KubeCalls
    namespace: str
    pods: dict[str, dict[str, Any]]
    eviction_requests: dict[str, dict[str, Any]]  # by name, as last listed or watched
    evictions_served: bool
    evictions_reported: dict[str, tuple[str, str, str]]  # run id -> (requesters, node, pod)

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

    def _refresh_evictions(self) -> None:
        """Report each run newly requested, and each whose every request was withdrawn."""
        if not self.evictions_served:
            return
        wanted = requested_runs(list(self.eviction_requests.values()), self.pods)
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
