"""Which runs an EvictionRequest names (lifecycle.k8s.io/v1alpha1): by pod name and uid,
intent `Eviction` only, requesters gathered per run."""

from __future__ import annotations

from typing import Any

from rota.k8s import manifests as k
from rota_executor.kube_evictions import RESPONDER, requested_runs, with_responder


def pod(name: str, uid: str, run_id: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": uid, "labels": {k.LABEL_RUN: run_id}},
            "spec": {"nodeName": "h100-0"}}


def request(name: str, uid: str, requester: str, intent: str = "Eviction") -> dict[str, Any]:
    return {"metadata": {"name": f"er-{requester}"},
            "spec": {"target": {"pod": {"name": name, "uid": uid}}, "requester": requester,
                     "intent": intent}}


def test_a_request_names_the_run_of_its_target_pod_by_name_and_uid() -> None:
    pods = {"p0": pod("p0", "u0", "run-a"), "p1": pod("p1", "u1", "run-b")}
    found = requested_runs([request("p0", "u0", "b.example.com/x"),
                            request("p0", "u0", "a.example.com/y"),
                            request("p1", "stale-uid", "a.example.com/y"),  # a namesake: not it
                            request("p1", "u1", "c.example.com/z", intent="Withdrawn"),
                            request("gone", "u9", "a.example.com/y")], pods)
    assert {run: who for run, (_, who) in found.items()} == {
        "run-a": "a.example.com/y, b.example.com/x"}


def test_the_job_names_rota_as_its_pods_eviction_responder() -> None:
    job: dict[str, Any] = {"spec": {"template": {"spec": {}}}}
    assert with_responder(job)["spec"]["template"]["spec"]["evictionResponders"] == [
        {"name": RESPONDER, "priority": 10000}]
