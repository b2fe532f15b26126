"""What the tests of the `kubernetes` backend share: a recording Reporter in place of the
executor's bookkeeping, a backend started against the FAKE API server through a kubeconfig,
run records, and a poll for a condition."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes_asyncio.config import new_client_from_config
from rota.clock import FakeClock
from rota.contracts.job import JobSpec, WorkerPlacement
from rota.k8s import manifests as k
from rota_executor.backend import Checkpoint, Exit, RunRecord, WorkerProcess
from rota_executor.kube import KubeBackend

from tests.builders import spec_doc
from tests.fake_kube_apiserver import FakeKubeApiServer

NS = "rota"


@dataclass
class RecordingReporter:
    ended_runs: dict[str, Exit] = field(default_factory=dict)
    pods_left_at_end: dict[str, int] = field(default_factory=dict)
    node_reports: list[tuple[str, str | None]] = field(default_factory=list)
    drain_reports: list[tuple[str, float | None, str]] = field(default_factory=list)
    eviction_reports: list[tuple[str, str, str, str, bool]] = field(default_factory=list)
    fake: FakeKubeApiServer | None = None

    async def launched(self, run_id: str, processes: list[WorkerProcess]) -> None:
        pass

    async def new_token(self, run_id: str) -> str:
        return "fresh-token"

    async def checkpointed(self, run: RunRecord, checkpoint: Checkpoint) -> None:
        pass

    async def node_changed(self, node: str, problem: str | None) -> None:
        self.node_reports.append((node, problem))

    async def node_drain(self, node: str, deadline_s: float | None, reason: str) -> None:
        self.drain_reports.append((node, deadline_s, reason))

    async def run_eviction(self, run_id: str, job_id: str, node: str, pod: str,
                           requester: str, *, withdrawn: bool) -> None:
        self.eviction_reports.append((run_id, node, pod, requester, withdrawn))

    async def ended(self, run_id: str, exit: Exit) -> None:
        assert self.fake is not None
        self.pods_left_at_end[run_id] = len(self.fake.pods_of(k.object_name(run_id)))
        self.ended_runs[run_id] = exit


async def make_backend(fake: FakeKubeApiServer, tmp_path: Path, made: list[Any],
                       start_timeout_s: float = 60.0,
                       grace_s: float = 5) -> tuple[KubeBackend, RecordingReporter, FakeClock]:
    kubeconfig = fake.kubeconfig(tmp_path / f"kubeconfig-{len(made)}")
    api = await new_client_from_config(config_file=str(kubeconfig))
    reporter, clock = RecordingReporter(fake=fake), FakeClock(datetime(2026, 1, 1, tzinfo=UTC))
    backend = KubeBackend(reporter, clock, api, namespace=NS, nats_url="nats://nats:4222",
                          start_timeout_s=start_timeout_s, grace_s=grace_s, poll_s=0.02)
    task = asyncio.create_task(backend.run())
    made.append((backend, reporter, clock, task))
    await asyncio.wait_for(backend.synced.wait(), 5)
    return backend, reporter, clock


def record(workers: int = 4, gpus: int = 8, run_id: str = "0190a7b2-0000-7000-8000-000000000001",
           state: str = "running", **kube: Any) -> RunRecord:
    spec = JobSpec.model_validate(spec_doc(workers=workers, gpus_per_worker=gpus,
                                           kubernetes={"image": "train:1", **kube}))
    placement = [WorkerPlacement(worker=i, node=f"gpu-{i}", gpus=list(range(gpus)))
                 for i in range(workers)]
    return RunRecord(run_id=run_id, job_id="0190a7b2-0000-7000-8000-0000000000aa", attempt=1,
                     backend="kubernetes", spec=spec, placement=placement, state=state,
                     started_at=datetime(2026, 1, 1, tzinfo=UTC))


async def until(condition: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        await asyncio.sleep(0.02)


def phases(fake: FakeKubeApiServer, run: RunRecord) -> list[str]:
    return [p["status"].get("phase", "") for p in fake.pods_of(k.object_name(run.run_id))]


