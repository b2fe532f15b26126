"""Pods that the cluster's admission refuses. The Job controller creates a Job's pods after
the Job, so a refusal never reaches the executor as an HTTP error: the pod simply never
appears, and the reason is a `FailedCreate` Event on the Job. The backend must read it and
fail the run with the cluster's words, rather than wait out the start timeout and requeue a
run that can never start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rota.k8s import manifests as k

from tests.fake_kube_apiserver import FakeKubeApiServer
from tests.fake_kube_cluster import JOB_TRACKING, forbidden
from tests.kube.harness import NS, make_backend, phases, record, until


async def test_a_pod_refused_by_pod_security_fails_the_run_with_the_clusters_reason(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    """Rota hardens every run pod to `restricted`, but a template that bypassed the
    submission's policy (here, on the node's network) is still refused by the cluster."""
    fake.enforce_pod_security(NS, "restricted")
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=2, pod_template={"spec": {"hostNetwork": True}})
    await backend.start(run, "tok")
    await until(lambda: run.run_id in reporter.ended_runs)
    exit = reporter.ended_runs[run.run_id]
    assert not exit.lost, "a run the cluster will never admit must fail, not requeue"
    assert 'violates PodSecurity "restricted:latest"' in exit.detail
    assert "host namespaces (hostNetwork=true)" in exit.detail
    (event, *_) = fake.events_of(k.object_name(run.run_id))
    assert event["reason"] == "FailedCreate"  # what the executor read it from
    assert fake.pods_of(k.object_name(run.run_id)) == []
    assert fake.get("jobs", k.object_name(run.run_id), NS) is None  # torn down


async def test_a_missing_service_account_fails_the_run_and_names_it(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=1, service_account="trainer")
    await backend.start(run, "tok")
    await until(lambda: run.run_id in reporter.ended_runs)
    exit = reporter.ended_runs[run.run_id]
    assert not exit.lost
    assert 'serviceaccount "trainer" not found' in exit.detail


async def test_one_refused_worker_of_a_running_gang_fails_the_whole_run(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    def quota(pod: dict[str, Any]) -> str | None:  # a ResourceQuota with room for one pod
        if pod["metadata"]["annotations"][k.INDEX_ANNOTATION] == "1":
            return forbidden(pod, "exceeded quota: gpus, requested: requests.nvidia.com/gpu=8, "
                                  "used: requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8")
        return None

    fake.admission.append(quota)
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=2)
    await backend.start(run, "tok")
    await until(lambda: run.run_id in reporter.ended_runs)
    exit = reporter.ended_runs[run.run_id]
    assert not exit.lost
    assert "exceeded quota: gpus" in exit.detail
    assert reporter.pods_left_at_end[run.run_id] == 0  # worker 0's pod was stopped first


async def test_a_webhook_that_fails_for_a_while_is_waited_for_not_taken_as_a_refusal(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    calls = {"n": 0}

    def flaky_webhook(pod: dict[str, Any]) -> str | None:
        calls["n"] += 1
        if calls["n"] <= 2:
            return ('Internal error occurred: failed calling webhook "policy.example.com": '
                    "context deadline exceeded")
        return None

    fake.admission.append(flaky_webhook)
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=1)
    await backend.start(run, "tok")
    await until(lambda: backend.runs[run.run_id].started)
    # The same message twice is one Event counted twice, as the real event recorder does.
    assert [e["count"] for e in fake.events_of(k.object_name(run.run_id))] == [2]
    assert run.run_id not in reporter.ended_runs


async def test_a_webhook_that_never_answers_ends_the_run_lost_at_the_start_timeout_with_its_words(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    fake.admission.append(lambda pod: 'Internal error occurred: failed calling webhook "policy.example.com": '
                          "connection refused")
    backend, reporter, clock = await make_backend(fake, tmp_path, backends, start_timeout_s=30)
    run = record(workers=1)
    await backend.start(run, "tok")
    await until(lambda: bool(fake.events_of(k.object_name(run.run_id))))
    clock.advance(31)
    await until(lambda: run.run_id in reporter.ended_runs)
    exit = reporter.ended_runs[run.run_id]
    assert exit.lost  # the cluster's trouble, not the job's: requeued
    assert 'failed calling webhook "policy.example.com"' in exit.detail


async def test_the_job_controller_puts_its_tracking_finalizer_on_every_pod_and_takes_it_off_at_the_end(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=2)
    await backend.start(run, "tok")
    await until(lambda: phases(fake, run) == ["Running"] * 2)
    assert all(JOB_TRACKING in p["metadata"]["finalizers"] for p in fake.pods_of(k.object_name(run.run_id)))
    fake.exit_pods(k.object_name(run.run_id), 0)
    await until(lambda: run.run_id in reporter.ended_runs)
    assert reporter.ended_runs[run.run_id].code == 0
    assert reporter.pods_left_at_end[run.run_id] == 0
