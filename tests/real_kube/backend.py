"""The `kubernetes` backend against the real control plane, with the executor's bookkeeping
replaced by a recording Reporter: what the backend creates, when it says a gang started or
ended, and that it never reports an end while a pod of the run still exists."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from rota.clock import SystemClock
from rota.contracts.job import JobSpec, WorkerPlacement
from rota.k8s import manifests as k
from rota.k8s.api import kube_client, read_json
from rota.k8s.inventory import Labels
from rota_executor.backend import Exit, RunRecord
from rota_executor.kube import KubeBackend

from tests.builders import spec_doc
from tests.kube.harness import RecordingReporter
from tests.real_kube.cluster import GPU, KubeCluster

_runs = itertools.count(1)


@dataclass
class ApiRecordingReporter(RecordingReporter):
    """The fast tier's recording Reporter, counting a run's pods left at its end from the real
    API server."""

    api: client.ApiClient | None = None
    namespace: str = ""

    async def ended(self, run_id: str, exit: Exit) -> None:
        assert self.api is not None
        pods = await read_json(await client.CoreV1Api(self.api).list_namespaced_pod(
            self.namespace, label_selector=f"{k.LABEL_RUN}={run_id}", _preload_content=False))
        self.pods_left_at_end[run_id] = len(pods["items"])
        self.ended_runs[run_id] = exit


@dataclass
class Started:
    backend: KubeBackend
    reporter: ApiRecordingReporter
    task: asyncio.Task[None]

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.backend.close()


async def start_backend(kubeconfig: Path, namespace: str, *, grace_s: float = 3.0,
                        start_timeout_s: float = 60.0, **kwargs: Any) -> Started:
    api = await kube_client(kubeconfig, None)
    reporter = ApiRecordingReporter(api=await kube_client(kubeconfig, None), namespace=namespace)
    backend = KubeBackend(reporter, SystemClock(), api, namespace=namespace,
                          nats_url="nats://unused:4222", gpu_resource=GPU,
                          start_timeout_s=start_timeout_s, grace_s=grace_s, poll_s=0.2,
                          labels=Labels(gpu_resource=GPU), **kwargs)
    task = asyncio.create_task(backend.run())
    await asyncio.wait_for(backend.synced.wait(), 30)
    return Started(backend, reporter, task)


def run_record(placement: list[tuple[str, list[int]]], *, kubernetes: dict[str, Any] | None = None,
               attempt: int = 1, state: str = "running") -> RunRecord:
    """A run of len(placement) workers, worker i on placement[i]'s node and GPUs."""
    n = next(_runs)
    gpus = len(placement[0][1])
    spec = JobSpec.model_validate(spec_doc(workers=len(placement), gpus_per_worker=gpus, kubernetes={
        "image": "registry.example/train:1", "command": ["python", "train.py"], **(kubernetes or {})}))
    return RunRecord(run_id=f"0190a7b2-0000-7000-8000-{n:012x}", job_id=f"0190a7b2-0000-7000-9000-{n:012x}",
                     attempt=attempt, backend="kubernetes", spec=spec,
                     placement=[WorkerPlacement(worker=i, node=node, gpus=g)
                                for i, (node, g) in enumerate(placement)],
                     state=state, started_at=datetime.now(UTC))


def pods_of(cluster: KubeCluster, namespace: str, run_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.get("pods", "-n", namespace, "-l", f"{k.LABEL_RUN}={run_id}")["items"]
    return items


def exit_pods(cluster: KubeCluster, namespace: str, run_id: str, code: int) -> None:
    """What a process exiting does, told to KWOK: its pod-complete stage ends each pod."""
    cluster.kubectl("annotate", "pods", "-n", namespace, "-l", f"{k.LABEL_RUN}={run_id}",
                    f"rota.dev/kwok-exit={code}", "--overwrite")


async def eventually(predicate: Callable[[], Awaitable[Any] | Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f} s")
        await asyncio.sleep(0.2)
