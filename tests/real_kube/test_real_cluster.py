"""One pod pinned, run and cleaned up, against a real API server: the tier's own KWOK cluster,
or the cluster ROTA_TEST_KUBECONFIG names. For kind, give a node a fake GPU resource first,
e.g. patch its status capacity with `example.com/gpu: 8`, and set
ROTA_TEST_GPU_RESOURCE=example.com/gpu. Needs Kubernetes 1.30+ (scheduling gates) and a
namespace `ROTA_TEST_NAMESPACE` (default `rota-test`) the kubeconfig's user may use. On a real
cluster the pod's busybox runs and exits 0; on KWOK the test gives the exit code itself."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rota.clock import SystemClock
from rota.contracts.job import JobSpec, WorkerPlacement
from rota.k8s.api import kube_client, read_json
from rota.k8s.inventory import Labels
from rota_executor.backend import Checkpoint, Exit, RunRecord, WorkerProcess
from rota_executor.kube import KubeBackend

from tests.builders import spec_doc
from tests.real_kube.backend import eventually, exit_pods, pods_of
from tests.real_kube.cluster import KubeCluster

KUBECONFIG = os.environ.get("ROTA_TEST_KUBECONFIG")
GPU_RESOURCE = os.environ.get("ROTA_TEST_GPU_RESOURCE", "nvidia.com/gpu")
NAMESPACE = os.environ.get("ROTA_TEST_NAMESPACE", "rota-test")

pytestmark = pytest.mark.real_kube


@pytest.fixture
def cluster(request: pytest.FixtureRequest) -> tuple[Path, KubeCluster | None]:
    if KUBECONFIG:
        return Path(KUBECONFIG), None
    kwok: KubeCluster = request.getfixturevalue("kube_cluster")
    kwok.namespace(NAMESPACE)
    return kwok.kubeconfig, kwok


class Reporter:
    def __init__(self) -> None:
        self.ends: dict[str, Exit] = {}  # not `ended`, the method's name
        self.any_ended = asyncio.Event()

    async def launched(self, run_id: str, processes: list[WorkerProcess]) -> None:
        pass

    async def new_token(self, run_id: str) -> str:
        return "token"

    async def checkpointed(self, run: RunRecord, checkpoint: Checkpoint) -> None:
        pass

    async def node_changed(self, node: str, problem: str | None) -> None:
        pass

    async def node_drain(self, node: str, deadline_s: float | None, reason: str) -> None:
        pass

    async def run_eviction(self, run_id: str, job_id: str, node: str, pod: str,
                           requester: str, *, withdrawn: bool) -> None:
        pass

    async def ended(self, run_id: str, exit: Exit) -> None:
        self.ends[run_id] = exit
        self.any_ended.set()


async def test_a_one_pod_run_is_pinned_runs_and_is_cleaned_up(
        cluster: tuple[Path, KubeCluster | None]) -> None:
    kubeconfig, kwok = cluster
    api = await kube_client(kubeconfig, None)
    from kubernetes_asyncio import client

    nodes = (await read_json(await client.CoreV1Api(api).list_node(_preload_content=False)))["items"]
    gpu_nodes = [n["metadata"]["name"] for n in nodes  # a pool's taint would need a toleration
                 if int((n["status"].get("allocatable") or {}).get(GPU_RESOURCE, "0")) > 0
                 and not any(t.get("effect") == "NoSchedule" for t in n["spec"].get("taints") or [])]
    assert gpu_nodes, f"no node allocates {GPU_RESOURCE}"
    reporter = Reporter()
    backend = KubeBackend(reporter, SystemClock(), api, namespace=NAMESPACE, nats_url="nats://unused:4222",
                          gpu_resource=GPU_RESOURCE, start_timeout_s=180, grace_s=5, poll_s=0.5,
                          labels=Labels(gpu_resource=GPU_RESOURCE))
    loop = asyncio.create_task(backend.run())
    try:
        spec = JobSpec.model_validate(spec_doc(workers=1, gpus_per_worker=1, kubernetes={
            "image": "busybox:1.36", "command": ["sh", "-c", 'echo "rank $RANK of $WORLD_SIZE"']}))
        run = RunRecord(run_id="0190a7b2-0000-7000-8000-00000000beef", job_id="0190a7b2-0000-7000-8000-00000000cafe",
                        attempt=1, backend="kubernetes", spec=spec,
                        placement=[WorkerPlacement(worker=0, node=gpu_nodes[0], gpus=[0])],
                        state="running", started_at=datetime.now(UTC))
        await backend.start(run, "token")
        if kwok is not None:
            await eventually(lambda: [p for p in pods_of(kwok, NAMESPACE, run.run_id)
                                      if p["status"].get("phase") == "Running"], 60, "the pod Running")
            assert pods_of(kwok, NAMESPACE, run.run_id)[0]["spec"]["nodeName"] == gpu_nodes[0]
            exit_pods(kwok, NAMESPACE, run.run_id, 0)
        await asyncio.wait_for(reporter.any_ended.wait(), 300)
        assert reporter.ends[run.run_id].code == 0, reporter.ends[run.run_id]
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
        await backend.close()
