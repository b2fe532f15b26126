"""What decides where and whether a pod is scheduled, beyond its node: taints on GPU pools,
and the rule that a gated pod's node selection may only be narrowed (KEP-3838), which is how
the backend pins each worker."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rota.contracts.job import JobSpec, WorkerPlacement
from rota.k8s import manifests as k
from rota_executor.backend import RunRecord

from tests.builders import spec_doc
from tests.fake_kube_apiserver import FakeKubeApiServer
from tests.kube.harness import make_backend, phases, record, until


async def test_a_template_with_an_empty_required_term_is_still_pinned_and_starts(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    # An empty term matches no node, and the API lets nothing be added to it on a gated pod.
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=2, pod_template={"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}}}})
    await backend.start(run, "tok")
    await until(lambda: backend.runs[run.run_id].started)
    assert run.run_id not in reporter.ended_runs


async def test_a_pin_the_api_server_refuses_fails_the_run_at_once_with_its_words(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    fake.fail_next("patch", "pods", 422)
    run = record(workers=2)
    await backend.start(run, "tok")
    await until(lambda: run.run_id in reporter.ended_runs)
    exit = reporter.ended_runs[run.run_id]
    assert not exit.lost, "a pin that can never be made must not requeue the run forever"
    assert "pod updates may not change fields" in exit.detail
    assert reporter.pods_left_at_end[run.run_id] == 0


GPU_TAINT = ("nvidia.com/gpu", "present")  # what GPU pools carry (GKE, AKS, the GPU operator's docs)


def share_record() -> RunRecord:
    spec = JobSpec.model_validate(spec_doc(workers=1, gpus_per_worker=1, gpu_share=0.5,
                                           kubernetes={"image": "train:1"}))
    return replace(record(workers=1, gpus=1), spec=spec, placement=[
        WorkerPlacement(worker=0, node="gpu-0", gpus=[3], gpu_share=0.5)])


async def test_a_gpu_share_pod_requesting_no_gpu_still_lands_on_a_gpu_tainted_node(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    fake.taint_node("gpu-0", *GPU_TAINT)
    backend, reporter, _ = await make_backend(fake, tmp_path, backends)
    run = share_record()
    await backend.start(run, "tok")
    await until(lambda: backend.runs[run.run_id].started)
    (pod,) = fake.pods_of(k.object_name(run.run_id))
    assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"]["limits"]
    assert run.run_id not in reporter.ended_runs


async def test_a_whole_gpu_gang_lands_on_gpu_tainted_nodes_without_the_cluster_adding_tolerations(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    # ExtendedResourceToleration (which would add them) is off by default in kube-apiserver.
    for node in ("gpu-0", "gpu-1"):
        fake.taint_node(node, *GPU_TAINT)
    backend, _, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=2)
    await backend.start(run, "tok")
    await until(lambda: backend.runs[run.run_id].started)


async def test_the_jobs_own_tolerations_let_its_pods_onto_a_dedicated_pool(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any]) -> None:
    for node in ("gpu-0", "gpu-1"):
        fake.taint_node(node, "dedicated", "research")
    backend, _, _ = await make_backend(fake, tmp_path, backends)
    run = record(workers=2, tolerations=[
        {"key": "dedicated", "operator": "Equal", "value": "research", "effect": "NoSchedule"}])
    await backend.start(run, "tok")
    await until(lambda: backend.runs[run.run_id].started)


async def test_a_taint_the_pods_do_not_tolerate_is_warned_of_at_start_and_named_at_the_timeout(
        fake: FakeKubeApiServer, tmp_path: Path, backends: list[Any],
        caplog: pytest.LogCaptureFixture) -> None:
    fake.taint_node("gpu-1", "dedicated", "research")
    backend, reporter, clock = await make_backend(fake, tmp_path, backends, start_timeout_s=30)
    run = record(workers=2)
    with caplog.at_level(logging.WARNING, logger="rota.executor.kubernetes"):
        await backend.start(run, "tok")
    warned = [r.getMessage() for r in caplog.records if "taint" in r.getMessage()]
    assert warned and "gpu-1" in warned[0] and "dedicated=research:NoSchedule" in warned[0]
    await until(lambda: sorted(phases(fake, run)) == ["Pending", "Running"])
    await until(lambda: any(c.get("message") for p in fake.pods_of(k.object_name(run.run_id))
                            for c in p["status"].get("conditions") or [] if c["status"] == "False"))
    clock.advance(31)
    await until(lambda: run.run_id in reporter.ended_runs)
    exit = reporter.ended_runs[run.run_id]
    assert exit.lost and "untolerated taint {dedicated: research}" in exit.detail
