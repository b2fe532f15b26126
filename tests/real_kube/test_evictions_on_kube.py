"""Rota as the eviction responder of its pods on the real control plane (lifecycle.k8s.io/
v1alpha1, the `EvictionRequestAPI` gate on), with the executor's bookkeeping replaced by a
recording Reporter.

Kubernetes 1.37.2 serves EvictionRequest and Eviction but has no evictionrequest-controller to
make an Eviction from a request, so this test plays that controller, as `kubelet.py` plays the
kubelet: it creates the Eviction of a run's pod and marks Rota its `Active` target responder.
Rota then asks for the run's stop (`RunEvictionRequested`), heartbeats in its own entry of
`status.responders` while the run saves and stops, and completes it once the pod is gone."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from rota_executor.kube_evictions import RESPONDER

from tests.real_kube.backend import eventually, pods_of, run_record, start_backend
from tests.real_kube.cluster import KubeCluster

pytestmark = pytest.mark.real_kube

NAMESPACE = "rota-evictions"


@pytest.fixture(scope="module")
def namespace(kube_cluster: KubeCluster) -> str:
    return kube_cluster.namespace(NAMESPACE)


def eviction_of(cluster: KubeCluster, name: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.get("evictions.lifecycle.k8s.io", name, "-n", NAMESPACE)
    return found


def mine(eviction: dict[str, Any]) -> dict[str, Any] | None:
    return next((r for r in (eviction.get("status") or {}).get("responders") or []
                 if r.get("name") == RESPONDER), None)


async def test_rota_responds_to_an_eviction_of_its_pod_heartbeats_and_completes(
        kube_cluster: KubeCluster, namespace: str) -> None:
    started = await start_backend(kube_cluster.kubeconfig, namespace)
    try:
        assert started.backend.evictions_served  # the gate is on: Rota is the pods' responder
        run = run_record([("h100-0", [0]), ("h100-1", [0])])
        await started.backend.start(run, "token")
        await eventually(lambda: len(pods_of(kube_cluster, namespace, run.run_id)) == 2
                         and all(p["status"].get("phase") == "Running"
                                 for p in pods_of(kube_cluster, namespace, run.run_id)),
                         60, "pods Running")
        pod = pods_of(kube_cluster, namespace, run.run_id)[0]
        assert pod["spec"]["evictionResponders"] == [{"name": RESPONDER, "priority": 10000}]

        # The controller's part: the Eviction of the pod, Rota its active target responder.
        name = "ev-" + pod["metadata"]["name"]
        kube_cluster.apply([{
            "apiVersion": "lifecycle.k8s.io/v1alpha1", "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"target": {"pod": {"name": pod["metadata"]["name"],
                                        "uid": pod["metadata"]["uid"]}}}}])
        status = {"status": {
            "requesters": [{"name": "maintenance.example.com/drainer", "intent": "Eviction"}],
            "targetResponders": [
                {"name": RESPONDER, "priority": 10000, "state": "Active"},
                {"name": "imperative-eviction.k8s.io/evictor", "priority": 100,
                 "state": "Inactive"}],
            # The API wants each target responder tracked here too, an active one with its
            # start (the present time, which the controller sets as it activates it).
            "responders": [{"name": RESPONDER, "startTime": datetime.now(UTC).strftime(
                "%Y-%m-%dT%H:%M:%SZ")}, {"name": "imperative-eviction.k8s.io/evictor"}]}}
        kube_cluster.kubectl("patch", "evictions.lifecycle.k8s.io", name, "-n", namespace,
                             "--subresource=status", "--type=merge", "-p", json.dumps(status))

        await eventually(lambda: any(r[0] == run.run_id and not r[4]
                                     for r in started.reporter.eviction_reports), 30,
                         "the run's stop asked for")
        [report] = [r for r in started.reporter.eviction_reports if r[0] == run.run_id]
        assert report[1:4] == (pod["spec"]["nodeName"], pod["metadata"]["name"],
                               "maintenance.example.com/drainer")
        entry = await eventually(lambda: mine(eviction_of(kube_cluster, name)), 30,
                                 "Rota's heartbeat")
        assert entry["startTime"] and entry["heartbeatTime"] and "completionTime" not in entry

        # The coordinator's stop, after the checkpoint: the Job and its pods go; Rota completes.
        await started.backend.stop(run)
        await eventually(lambda: run.run_id in started.reporter.ended_runs, 60, "the run ended")
        done = await eventually(lambda: (e := mine(eviction_of(kube_cluster, name)))
                                and e.get("completionTime") and e, 30, "Rota's completion")
        assert done["startTime"] == entry["startTime"]
        assert "stopped" in done["message"]
        assert not any(r[0] == run.run_id and r[4] for r in started.reporter.eviction_reports)
    finally:
        await started.close()
