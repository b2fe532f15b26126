"""Which runs an EvictionRequest or an Eviction names (lifecycle.k8s.io/v1alpha1): by pod name
and uid, intent `Eviction` only, an Eviction only while Rota is its active responder; and the
responder status Rota writes, its own entry and nothing else."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rota.k8s import manifests as k
from rota_executor.kube_evictions import (
    RESPONDER,
    active_evictions,
    requested_runs,
    responder_status,
    with_responder,
)


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


def eviction(name: str, uid: str, state: str = "Active") -> dict[str, Any]:
    return {"metadata": {"name": "ev-1"}, "spec": {"target": {"pod": {"name": name, "uid": uid}}},
            "status": {"targetResponders": [{"name": RESPONDER, "priority": 10000, "state": state},
                                            {"name": "imperative-eviction.k8s.io/evictor",
                                             "priority": 100, "state": "Inactive"}],
                       "requesters": [{"name": "b.example.com/x", "intent": "Eviction"},
                                      {"name": "a.example.com/y", "intent": "Withdrawn"}],
                       "responders": [{"name": "other.example.com/r", "startTime": "t0"}]}}


def test_an_eviction_names_the_run_only_while_rota_is_its_active_responder() -> None:
    pods = {"p0": pod("p0", "u0", "run-a")}
    [(run, (_, who, _))] = active_evictions([eviction("p0", "u0")], pods).items()
    assert (run, who) == ("run-a", "b.example.com/x")
    assert active_evictions([eviction("p0", "u0", state="Inactive")], pods) == {}
    assert active_evictions([eviction("p0", "other-uid")], pods) == {}


def test_rota_writes_only_its_own_responder_entry() -> None:
    before = eviction("p0", "u0")
    started = responder_status(before, datetime(2026, 12, 7, 10, 0, tzinfo=UTC), completed=False,
                               message="saving")
    other, mine = started["status"]["responders"]
    assert other == {"name": "other.example.com/r", "startTime": "t0"}
    assert mine == {"name": RESPONDER, "startTime": "2026-12-07T10:00:00Z",
                    "heartbeatTime": "2026-12-07T10:00:00Z", "message": "saving"}
    done = responder_status(started, datetime(2026, 12, 7, 10, 1, tzinfo=UTC), completed=True,
                            message="stopped")
    assert done["status"]["responders"][1] == {
        "name": RESPONDER, "startTime": "2026-12-07T10:00:00Z",
        "heartbeatTime": "2026-12-07T10:01:00Z", "completionTime": "2026-12-07T10:01:00Z",
        "message": "stopped"}
    assert before["status"]["responders"] == [{"name": "other.example.com/r", "startTime": "t0"}]
    assert started["status"]["targetResponders"] == before["status"]["targetResponders"]
